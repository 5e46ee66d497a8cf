"""Rule premises at a release: whether a curated fact a rule rests on holds, and whether
the wheels proved it there.

The records are generated (``rules/audit/premises.json`` by ``scripts/gen_premises.py``
from ``rules/curated/premises.toml``). A rule asks :func:`premise` before it fires: it never
fires where the premise is false, and where the premise is not verified (its proof failed,
or the target release is newer than every wheel the proof read) it caps its finding at a
warning with :func:`capped` and appends :attr:`Verdict.note`.
"""

from __future__ import annotations

import json
from functools import cache

import msgspec

from kvtool.audit.model import Severity
from kvtool.errors import KvtoolError
from kvtool.resources import rules_dir
from kvtool.versions import Version

PREMISES_FILE = "audit/premises.json"


class PremiseRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One proven (or not) premise as the generator committed it."""

    id: str
    package: str
    rules: tuple[str, ...]
    statement: str
    source: str
    since: str | None = None
    until: str | None = None
    proven: bool
    checked_through: str

    def contains(self, version: str) -> bool:
        v = Version(version)
        low = self.since is None or v >= Version(self.since)
        return low and (self.until is None or v < Version(self.until))


class Verdict(msgspec.Struct, frozen=True):
    """A premise at one release: ``holds`` (a rule may fire) and ``verified`` (proven there)."""

    holds: bool
    verified: bool
    note: str = ""  # why it is not verified, ready to append to a message


class _PremiseFile(msgspec.Struct, frozen=True):
    premises: tuple[PremiseRecord, ...]


@cache
def premise_records() -> dict[str, PremiseRecord]:
    """Every generated premise by id (read once per process)."""
    path = rules_dir() / PREMISES_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        parsed = msgspec.convert(data, type=_PremiseFile)
    except (OSError, ValueError, msgspec.ValidationError) as exc:
        raise KvtoolError(f"data table {path} is missing or malformed: {exc}") from exc
    return {record.id: record for record in parsed.premises}


def premise(key: str, version: str) -> Verdict:
    """The premise ``key`` at vLLM (or LMCache, by the record's package) ``version``.

    ``KeyError`` for an id no record has: a rule naming a premise that was never proven
    is a programming error, caught by the rules' tests.
    """
    return verdict_of(premise_records()[key], version)


def verdict_of(record: PremiseRecord, version: str) -> Verdict:
    """What ``record`` says at ``version`` (pure: :func:`premise` for a shipped record)."""
    if not record.contains(version):
        return Verdict(holds=False, verified=record.proven)
    if not record.proven:
        return Verdict(
            holds=True,
            verified=False,
            note=(
                f" (not verified: kvtool could not prove from the {record.package} wheels that "
                f"{record.statement}; reported as a warning at most)"
            ),
        )
    if Version(version) > Version(record.checked_through):
        return Verdict(
            holds=True,
            verified=False,
            note=(
                f" (not verified at {record.package} {version}: the newest release whose wheel "
                f"kvtool read is {record.checked_through}; reported as a warning at most)"
            ),
        )
    return Verdict(holds=True, verified=True)


def capped(severity: Severity, verdict: Verdict) -> Severity:
    """``severity``, lowered to a warning where the premise is not verified."""
    if verdict.verified or severity is not Severity.error:
        return severity
    return Severity.warning
