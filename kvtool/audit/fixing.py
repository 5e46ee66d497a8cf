"""``--fix`` / ``--diff``: hand the findings' token fixes to :mod:`kvtool.audit.fix` per input.

Shell scripts, Kubernetes manifests and compose files are rewritten (``--fix``, an
atomic replace that changes only the bytes of the edits and aborts a file changed on
disk since it was read) or diffed (``--diff``, a patch of the bytes as written); argv
inputs print the fixed command; ``--config`` files and KAITO ConfigMaps only list their
fixes. Only fixes whose applicability is
allowed are used.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kvtool.audit.engine import AuditReport
from kvtool.audit.fix import (
    REWRITABLE,
    FixOutcome,
    fix_argv,
    fix_text,
    keep_line_endings,
    unified_diff,
)
from kvtool.audit.model import Finding, Fix, InputKind, Invocation
from kvtool.errors import KvtoolError
from kvtool.fsio import atomic_write, decode_text, read_input_bytes, reader_text
from kvtool.termsafe import terminal_line

FixedKey = tuple[str, str | None, int | None]


@dataclass
class FixRun:
    written: bool  # False for --diff: the fixes are shown, the files stay as they are
    diff: str = ""
    applied: int = 0
    notes: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)  # files left alone: why, one line each
    fixed_codes: set[FixedKey] = field(default_factory=set)

    @property
    def summary(self) -> str:
        verb = "Applied" if self.written else "Would apply"
        text = f"{verb} {self.applied} fix(es)." if self.applied else "No fixes applied."
        if not self.applied and not self.failures:
            text = "No fixes to apply."
        if self.failures:
            text += f" {len(self.failures)} file(s) not written (see the errors)."
        return " ".join([text, *self.notes])


def _key(finding: Finding) -> FixedKey:
    loc = finding.location
    return (finding.code, loc.file if loc else None, loc.line if loc else None)


def _fixable(
    findings: Sequence[Finding], applicable: tuple[str, ...]
) -> list[tuple[Fix, list[Finding]]]:
    """Each distinct allowed fix once, with every finding it fixes (two rules may propose
    the same edit)."""
    groups: dict[tuple[object, ...], tuple[Fix, list[Finding]]] = {}
    for finding in findings:
        fix = finding.fix
        if fix is None or fix.applicability not in applicable or not fix.remove_tokens:
            continue
        groups.setdefault((fix.remove_tokens, fix.replacement), (fix, []))[1].append(finding)
    return list(groups.values())


def _record(run: FixRun, chosen: list[tuple[Fix, list[Finding]]], outcome: FixOutcome) -> None:
    run.applied += outcome.applied
    for number in outcome.applied_fixes:
        run.fixed_codes.update(_key(finding) for finding in chosen[number][1])
    run.notes.extend(f"Skipped: {reason}." for reason in outcome.skipped)


def apply_fixes(
    invocations: Sequence[Invocation],
    report: AuditReport,
    *,
    applicable: tuple[str, ...],
    write: bool,
    argv: Sequence[str] = (),
    stdin_name: str | None = None,
) -> FixRun:
    """Apply (``write``) or preview the allowed fixes; ``argv`` is the original command for
    argv inputs. ``stdin_name``: the name standard input was audited under
    (``--stdin-filename``); a file of that name was never audited, so it is not written."""
    run = FixRun(written=write)
    by_label = {inv.label: inv for inv in invocations}
    per_file: dict[str, list[tuple[Fix, list[Finding]]]] = {}
    kinds: dict[str, InputKind] = {}
    for inv_report in report.invocations:
        invocation = by_label.get(inv_report.label)
        chosen = _fixable(inv_report.findings, applicable)
        if invocation is None or not chosen:
            continue
        if invocation.kind == "argv":
            outcome = fix_argv(list(argv), [fix for fix, _ in chosen])
            run.diff += outcome.diff
            _record(run, chosen, outcome)
        elif invocation.kind in REWRITABLE and invocation.file:
            per_file.setdefault(invocation.file, []).extend(chosen)
            kinds[invocation.file] = invocation.kind
        else:
            run.notes.append(
                f"{invocation.label}: {len(chosen)} fix(es) for {invocation.kind} input are "
                "shown, not applied."
            )
    for file, chosen in per_file.items():
        if file == stdin_name:
            # The edits were planned on the text of stdin; the file of that name (if
            # there is one) holds other text, or the same by chance: never rewritten.
            run.failures.append(
                f"{file}: audited from standard input (--stdin-filename), not from the file "
                "of that name; that file is neither diffed nor written"
            )
            continue
        try:
            _fix_file(run, file, chosen, kinds[file], invocations, write)
        except KvtoolError as error:
            run.failures.append(str(error))
    return run


def _fix_file(
    run: FixRun,
    file: str,
    chosen: list[tuple[Fix, list[Finding]]],
    kind: InputKind,
    invocations: Sequence[Invocation],
    write: bool,
) -> None:
    """Fix one file: edits are planned on the text as the readers saw it (no BOM, LF
    line ends) and written back with every untouched byte as it was."""
    path = Path(file)
    original = read_input_bytes(path)
    raw = decode_text(original, file)
    text = reader_text(raw)
    outcome = fix_text(
        text,
        [fix for fix, _ in chosen],
        file=file,
        kind=kind,
        invocations=[inv for inv in invocations if inv.file == file],
    )
    new_raw = keep_line_endings(raw, outcome.text) if outcome.text != text else raw
    if write and new_raw != raw:
        atomic_write(path, new_raw.encode("utf-8"), expected=original)
    run.diff += unified_diff(raw, new_raw, terminal_line(file))
    _record(run, chosen, outcome)
