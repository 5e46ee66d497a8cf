"""Write the JSON Schema of every command's JSON document (``--check``: exit 1 if stale).

One file per report kind in kvtool.output.kinds.REPORT_KINDS:
docs/schemas/<kind>.schema.json, generated from the records each command renders;
and one per input format in INPUT_SCHEMAS (the trace ``kvtool simulate --trace`` reads).

python scripts/gen_schemas.py          # rewrite them
python scripts/gen_schemas.py --check  # CI: fail when a committed file differs
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from generated_files import write_or_check

from kvtool.output.kinds import REPORT_KINDS, document_schema, report_kind
from kvtool.simulate.trace import trace_schema

SCHEMAS = Path(__file__).resolve().parent.parent / "docs" / "schemas"
INPUT_SCHEMAS = {"trace": trace_schema}


def schema_path(kind: str) -> Path:
    return SCHEMAS / f"{kind}.schema.json"


def generated() -> dict[Path, str]:
    """Each schema file and the text it should hold."""
    files = {
        schema_path(name): json.dumps(document_schema(report_kind(name)), indent=2) + "\n"
        for name in REPORT_KINDS
    }
    for name, schema in INPUT_SCHEMAS.items():
        files[schema_path(name)] = json.dumps(schema(), indent=2) + "\n"
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only compare, do not write")
    args = parser.parse_args(argv)
    return write_or_check(generated(), "python scripts/gen_schemas.py", check=args.check)


if __name__ == "__main__":
    sys.exit(main())
