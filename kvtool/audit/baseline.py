"""Baselines: adopt kvtool on a repository that already has findings, without editing it.

``kvtool audit deploy/ --baseline kvtool-baseline.json --update-baseline`` records every
finding the run reports; later runs with ``--baseline`` (or the ``baseline`` setting)
report only findings that are not in it, so CI fails on what is new. A finding is known
by its rule, its file (relative to the baseline's directory, so the baseline travels with
the repository), the object it is about and its flag: not its line, which moves when
lines are added above it. Each entry counts: two identical findings need two entries.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import msgspec

from kvtool import __version__
from kvtool.audit.engine import AuditReport
from kvtool.audit.model import Finding
from kvtool.audit.render.objects import object_of
from kvtool.errors import KvtoolError
from kvtool.fsio import atomic_write, read_input_text, refuse_overwriting_inputs

SCHEMA_VERSION = 1


class BaselineEntry(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    code: str
    file: str | None  # relative to the baseline's directory; None for argv input
    object: str | None = None  # Kind/name container c, compose service, ...
    flag: str | None = None
    message: str = ""  # for the reader of the file; not part of the match
    count: int = 1


class BaselineFile(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    schema_version: int
    tool: dict[str, str]
    findings: list[BaselineEntry]


Key = tuple[str, str | None, str | None, str | None]


def _relative(file: str | None, root: Path) -> str | None:
    if file is None or file.startswith("<"):
        return file
    resolved = Path(file).resolve()
    if resolved.is_relative_to(root):
        return resolved.relative_to(root).as_posix()
    return Path(os.path.relpath(resolved, root)).as_posix()


def _key(finding: Finding, root: Path) -> Key:
    loc = finding.location
    file = _relative(loc.file if loc else None, root)
    return (finding.code, file, object_of(finding), finding.flag)


def load_baseline(path: Path) -> Counter[Key]:
    """The findings ``path`` records, with their counts; a bad file raises ``KvtoolError``."""
    text = read_input_text(path)
    try:
        document = msgspec.json.decode(text, type=BaselineFile)
    except msgspec.DecodeError as error:
        raise KvtoolError(f"--baseline {path}: not a kvtool baseline ({error})") from None
    if document.schema_version != SCHEMA_VERSION:
        raise KvtoolError(
            f"--baseline {path}: schema_version {document.schema_version}; "
            f"this kvtool reads {SCHEMA_VERSION} (write it again with --update-baseline)"
        )
    known: Counter[Key] = Counter()
    for entry in document.findings:
        known[(entry.code, entry.file, entry.object, entry.flag)] += max(entry.count, 1)
    return known


def _is_baseline(path: Path) -> bool:
    """Whether ``path`` holds a kvtool baseline of any schema version (a JSON object with
    ``schema_version`` and ``findings``), so renewing it loses nothing of the user's."""
    try:
        document = msgspec.json.decode(read_input_text(path))
    except (KvtoolError, msgspec.DecodeError):
        return False
    return isinstance(document, dict) and {"schema_version", "findings"} <= document.keys()


def without_baselined(report: AuditReport, known: Counter[Key], root: Path) -> int:
    """Drop from ``report`` the findings ``known`` records (each entry once); how many."""
    left = Counter(known)
    dropped = 0
    for invocation in report.invocations:
        kept = []
        for finding in invocation.findings:
            key = _key(finding, root)
            if left[key] > 0:
                left[key] -= 1
                dropped += 1
            else:
                kept.append(finding)
        invocation.findings = kept
    return dropped


def write_baseline(path: Path, report: AuditReport, inputs: Iterable[Path | str]) -> int:
    """Record every finding of ``report`` in ``path``; how many. Never over an input, nor
    over an existing file that is no baseline (a settings file, a script)."""
    refuse_overwriting_inputs(path, inputs, "--baseline")
    if path.exists() and not _is_baseline(path):
        raise KvtoolError(f"--baseline {path}: exists and is not a kvtool baseline; not written")
    root = path.resolve().parent
    counts: Counter[Key] = Counter()
    messages: dict[Key, str] = {}
    for finding in report.findings:
        key = _key(finding, root)
        counts[key] += 1
        messages.setdefault(key, finding.message)
    entries = [
        BaselineEntry(code=code, file=file, object=named, flag=flag, message=messages[key], count=n)
        for key, n in sorted(counts.items(), key=lambda item: tuple(map(str, item[0])))
        for code, file, named, flag in [key]
    ]
    document = BaselineFile(
        schema_version=SCHEMA_VERSION,
        tool={"name": "kvtool", "version": __version__},
        findings=entries,
    )
    data = msgspec.json.format(msgspec.json.encode(document), indent=2) + b"\n"
    # kvtool's own file: a directory walk may have read it as a candidate, and renewing
    # it is what --update-baseline asks; the audited inputs were refused above.
    atomic_write(path, data, flag="--baseline", own_file=True)
    return sum(counts.values())
