"""A flag some release removed, and where an audit at that release reports it.

Every reader's test writes this flag inside its shape and checks that the finding
lands on the line it was written: a reader that misses the shape, or loses its
positions, fails the test.
"""

from __future__ import annotations

from pathlib import Path

from kvtool.audit.engine import Auditor
from kvtool.audit.inputs import InputSet, StdinInput, read_input_set
from kvtool.audit.normalize import normalize
from kvtool.audit.settings import AuditSettings
from kvtool.audit.tables import ShippedTables
from kvtool.releases import release_index

REMOVED = "--calculate-kv-scales"
_GONE = release_index().flags[REMOVED].gone_at
assert _GONE is not None, f"{REMOVED} must be a flag some release removed"
GONE_AT: str = _GONE
REMOVED_CODE = "VG002"  # flag-removed


def removed_at(found: InputSet) -> list[tuple[str, int]]:
    """(file name, line) of every removed-flag finding when ``found`` is audited at GONE_AT."""
    settings = AuditSettings(vllm_version=GONE_AT)
    report = Auditor(ShippedTables(), normalize, settings, version_from_cli=True).run(
        found.invocations
    )
    return sorted(
        (Path(f.location.file or "").name, f.location.line or 0)
        for f in report.findings
        if f.code == REMOVED_CODE and f.location is not None
    )


def removed_in_text(tmp_path: Path, name: str, text: str) -> list[tuple[str, int]]:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return removed_at(read_input_set([path]))


def removed_in_stdin(text: str, name: str) -> list[tuple[str, int]]:
    return removed_at(read_input_set([], stdin=StdinInput(text, name)))


def line_of(text: str, needle: str, occurrence: int = 1) -> int:
    """1-based line of the ``occurrence``-th line containing ``needle``."""
    hits = [n for n, line in enumerate(text.splitlines(), 1) if needle in line]
    return hits[occurrence - 1]
