"""Write the audit's generated docs (``--check``: exit 1 if one is stale).

docs/rules.md comes from the rule registry, docs/audit-inputs.md from the input reader
registry (the JSON Schemas of every command's documents come from scripts/gen_schemas.py).

python scripts/gen_rule_docs.py          # rewrite it
python scripts/gen_rule_docs.py --check  # CI: fail when a committed file differs
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from generated_files import write_or_check

from kvtool.audit.inputs.registry import describe as describe_inputs
from kvtool.audit.ruledocs import markdown

DOCS = Path(__file__).resolve().parent.parent / "docs"


def generated() -> dict[Path, str]:
    """Each generated file and the text it should hold."""
    return {
        DOCS / "rules.md": markdown(),
        DOCS / "audit-inputs.md": describe_inputs(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only compare, do not write")
    args = parser.parse_args(argv)
    return write_or_check(generated(), "python scripts/gen_rule_docs.py", check=args.check)


if __name__ == "__main__":
    sys.exit(main())
