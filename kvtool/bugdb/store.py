"""Read the bug database: ``rules/bugs/<component>.toml`` and ``rules/bugs/proofs.json``.

Each TOML file holds the records of one component (``[[bugs]]`` tables); a record that
does not fit :class:`~kvtool.bugdb.model.BugRecord` is refused with the file and the
record named. ``proofs.json`` is written by ``scripts/gen_bug_ranges.py``: per record,
the wheels it read at each boundary (file name and sha256) and whether the marker agreed
with the range; a record is *proven* only when its entry matches its current range.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

import msgspec

from kvtool.bugdb.model import BugRecord
from kvtool.errors import KvtoolError
from kvtool.resources import read_table, rules_dir

PROOFS = "proofs.json"


class BoundaryCheck(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The marker looked up in one release's wheel."""

    release: str
    wheel: str
    sha256: str
    file_found: bool
    present: bool
    expected: bool


class Proof(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What the generator read for one record."""

    package: str
    introduced: str | None
    fixed: str | None
    checks: tuple[BoundaryCheck, ...]
    # Ends of the range no marker checks (a fix marker without an introduced marker):
    # the range is then not proven, only the checked end is.
    unchecked: tuple[str, ...] = ()

    @property
    def holds(self) -> bool:
        agree = all(c.present == c.expected for c in self.checks)
        return bool(self.checks) and agree and not self.unchecked


def bugs_dir() -> Path:
    return rules_dir() / "bugs"


def parse_records(rows: list[Any], where: str) -> tuple[BugRecord, ...]:
    """Typed records from one file's ``bugs`` rows, every pattern a regular expression
    (KvtoolError naming file and record)."""
    out = _convert_records(rows, where)
    for bug in out:
        for pattern in bug.trigger.patterns():
            try:
                re.compile(pattern)
            except re.error as exc:
                raise KvtoolError(
                    f"bug database {where}: record {bug.id}: not a regular expression:"
                    f" {pattern!r}"
                ) from exc
    return out


def _check_table(path: Path, table: dict[str, Any]) -> None:
    """The whole check of one database file, run when it is parsed (its cached form has
    passed it: compiling each of the database's ~70 patterns cost every audit's cold
    start more than matching them, issue 26)."""
    rows = table.get("bugs", [])
    if isinstance(rows, list):
        parse_records(rows, str(path))


def _convert_records(rows: list[Any], where: str) -> tuple[BugRecord, ...]:
    out = []
    for index, row in enumerate(rows):
        name = row.get("id", f"#{index + 1}") if isinstance(row, dict) else f"#{index + 1}"
        try:
            out.append(msgspec.convert(row, type=BugRecord))
        except (msgspec.ValidationError, ValueError) as exc:
            raise KvtoolError(f"bug database {where}: record {name}: {exc}") from exc
    return tuple(out)


@cache
def records() -> tuple[BugRecord, ...]:
    """Every record, file by file in name order, each file's records in written order."""
    found: list[BugRecord] = []
    seen: dict[str, str] = {}
    for path in sorted(bugs_dir().glob("*.toml")):
        rows = read_table(path, check=_check_table).get("bugs", [])
        if not isinstance(rows, list):
            raise KvtoolError(f"bug database {path}: 'bugs' must be a list of tables")
        for record in _convert_records(rows, str(path)):
            if record.id in seen:
                raise KvtoolError(
                    f"bug database {path}: record {record.id}: already in {seen[record.id]}"
                )
            if path.stem != record.component:
                raise KvtoolError(
                    f"bug database {path}: record {record.id}: component {record.component}"
                    f" belongs in {record.component}.toml"
                )
            seen[record.id] = str(path)
            found.append(record)
    return tuple(found)


def record(record_id: str) -> BugRecord | None:
    wanted = record_id.upper()
    return next((r for r in records() if r.id == wanted), None)


@cache
def proofs() -> dict[str, Proof]:
    """Record id -> what the generator read (empty when the file is missing)."""
    path = bugs_dir() / PROOFS
    if not path.is_file():
        return {}
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        return msgspec.convert(raw["records"], type=dict[str, Proof])
    except (ValueError, KeyError, msgspec.ValidationError) as exc:
        raise KvtoolError(f"bug database {path}: {exc}") from exc


def proof_of(bug: BugRecord) -> Proof | None:
    """The generator's proof of ``bug``'s current range (None: not proven)."""
    found = proofs().get(bug.id)
    if found is None or not found.holds:
        return None
    if (found.introduced, found.fixed) != (bug.introduced, bug.fixed):
        return None
    return found
