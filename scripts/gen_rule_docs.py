"""Write docs/rules.md from the audit rule registry (``--check``: exit 1 if it is stale).

python scripts/gen_rule_docs.py          # rewrite docs/rules.md
python scripts/gen_rule_docs.py --check  # CI: fail when the committed file differs
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kvtool.audit.ruledocs import markdown

DOCS = Path(__file__).resolve().parent.parent / "docs" / "rules.md"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only compare, do not write")
    args = parser.parse_args(argv)
    text = markdown()
    if args.check:
        current = DOCS.read_text(encoding="utf-8") if DOCS.exists() else ""
        if current != text:
            print(f"{DOCS} is out of date: run python scripts/gen_rule_docs.py", file=sys.stderr)
            return 1
        return 0
    DOCS.write_text(text, encoding="utf-8")
    print(f"wrote {DOCS}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
