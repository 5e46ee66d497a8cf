"""Write generated files, or (``check``) only report the ones that differ from their text.

Shared by the docs generators (gen_rule_docs.py, gen_schemas.py) so both behave alike:
``--check`` exits 1 naming each stale file and the command that rewrites it.
"""

from __future__ import annotations

import sys
from pathlib import Path


def write_or_check(files: dict[Path, str], command: str, *, check: bool) -> int:
    """Rewrite each stale file (0), or with ``check`` name each one and return 1 if any."""
    stale = 0
    for path, text in files.items():
        current = path.read_text(encoding="utf-8") if path.exists() else ""
        if current == text:
            continue
        if check:
            print(f"{path} is out of date: run {command}", file=sys.stderr)
            stale += 1
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path}", file=sys.stderr)
    return 1 if stale else 0
