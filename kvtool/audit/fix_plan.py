"""The orchestration of ``--fix`` / ``--diff``: plan each input's token fixes through the edit
engine (:mod:`kvtool.audit.edits`), then show or write them.

Shell scripts, Kubernetes manifests and compose files are rewritten (``--fix``, an
atomic replace that changes only the bytes of the edits and aborts a file changed on
disk since it was read) or diffed (``--diff``, a patch of the bytes as written); argv
inputs print the fixed command; ``--config`` files and KAITO ConfigMaps only list their
fixes. Only fixes whose applicability is allowed are used.

Every edit to a file goes through one :class:`EditPlan`: the token fixes here, and any
further edit a caller adds (``kvtool upgrade`` drops idle env lines and retags images),
are applied to the file's text in memory; the diff shown by ``--diff`` and the bytes
``--fix`` writes are both made from that one final text, so a preview never differs from
the write.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from kvtool.audit.edits import (
    FixOutcome,
    fix_argv,
    fix_text,
    keep_line_endings,
    unified_diff,
)
from kvtool.audit.engine import AuditReport
from kvtool.audit.model import REWRITABLE, Finding, Fix, InputKind, Invocation
from kvtool.errors import KvtoolError
from kvtool.fsio import atomic_write, decode_text, read_input_bytes, reader_text
from kvtool.termsafe import terminal_line, terminal_patch

if TYPE_CHECKING:
    from kvtool.output.streams import Output

FixedKey = tuple[str, str | None, int | None]


@dataclass
class _PendingFile:
    original: bytes  # the bytes as read: a write aborts if the file changed since
    raw: str  # their text, line endings and all
    text: str  # the text with every planned edit applied


@dataclass
class EditPlan:
    """The edits planned for files, applied in memory until :meth:`write`."""

    files: dict[str, _PendingFile] = field(default_factory=dict)

    def text(self, file: str) -> str:
        """The file's text with the edits planned so far (read on first use)."""
        pending = self.files.get(file)
        if pending is None:
            original = read_input_bytes(Path(file))
            raw = decode_text(original, file)
            pending = self.files[file] = _PendingFile(original, raw, raw)
        return pending.text

    def edit(self, file: str, change: Callable[[str], str]) -> bool:
        """Plan ``change`` (the text after the edits so far -> the new text); True when
        it changed anything."""
        before = self.text(file)
        after = change(before)
        self.files[file].text = after
        return after != before

    def diff(self, leave_out: Sequence[str] = ()) -> str:
        """One unified diff per changed file, from the bytes read to the bytes written."""
        return "".join(  # a file name in a diff header is shown like any other input
            unified_diff(pending.raw, pending.text, terminal_line(file))
            for file, pending in self.files.items()
            if pending.text != pending.raw and file not in leave_out
        )

    def write(self) -> dict[str, str]:
        """Write every changed file; the files that could not be written, with why."""
        failures = {}
        for file, pending in self.files.items():
            if pending.text == pending.raw:
                continue
            try:
                atomic_write(Path(file), pending.text.encode("utf-8"), expected=pending.original)
            except KvtoolError as error:
                failures[file] = str(error)
        return failures


@dataclass
class FixRun:
    written: bool  # False for --diff: the fixes are shown, the files stay as they are
    diff: str = ""
    applied: int = 0
    notes: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)  # files left alone: why, one line each
    fixed_codes: set[FixedKey] = field(default_factory=set)
    applied_by_file: dict[str, int] = field(default_factory=dict)

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
    (``--stdin-filename``); the file of that name was never audited, so it is left alone."""
    plan = EditPlan()
    run = plan_fixes(
        plan,
        invocations,
        report,
        applicable=applicable,
        argv=argv,
        write=write,
        stdin_name=stdin_name,
    )
    finish(run, plan)
    return run


def finish(run: FixRun, plan: EditPlan) -> set[str]:
    """For ``--fix``, write the plan (a file that cannot be written keeps none of its
    fixes); then add the diff of what was written, or would be, to ``run``. Returns the
    files that could not be written."""
    failed = plan.write() if run.written else {}
    for file, why in failed.items():
        run.failures.append(why)
        undone = {key for key in run.fixed_codes if key[1] == file}
        run.fixed_codes -= undone
        run.applied -= run.applied_by_file.pop(file, 0)
    run.diff += plan.diff(leave_out=list(failed))
    return set(failed)


def plan_fixes(
    plan: EditPlan,
    invocations: Sequence[Invocation],
    report: AuditReport,
    *,
    applicable: tuple[str, ...],
    argv: Sequence[str] = (),
    write: bool = False,
    stdin_name: str | None = None,
) -> FixRun:
    """Plan the allowed fixes of ``report`` into ``plan`` (argv inputs get their fixed
    command as the run's diff); nothing is written. ``stdin_name``: see :func:`apply_fixes`."""
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
            _fix_file(run, plan, file, chosen, kinds[file], invocations)
        except KvtoolError as error:
            run.failures.append(str(error))
    return run


def _fix_file(
    run: FixRun,
    plan: EditPlan,
    file: str,
    chosen: list[tuple[Fix, list[Finding]]],
    kind: InputKind,
    invocations: Sequence[Invocation],
) -> None:
    """Fix one file: edits are planned on the text as the readers saw it (no BOM, LF
    line ends) and kept with every untouched byte as it was."""
    outcomes: list[FixOutcome] = []

    def change(raw: str) -> str:
        text = reader_text(raw)
        outcome = fix_text(
            text,
            [fix for fix, _ in chosen],
            file=file,
            kind=kind,
            invocations=[inv for inv in invocations if inv.file == file],
        )
        outcomes.append(outcome)
        return keep_line_endings(raw, outcome.text) if outcome.text != text else raw

    plan.edit(file, change)
    _record(run, chosen, outcomes[0])
    run.applied_by_file[file] = run.applied_by_file.get(file, 0) + outcomes[0].applied


def show_fixes(
    out: Output, *, diff: str, summary: str, failures: Sequence[str], preview: bool
) -> None:
    """What ``--diff`` (``preview``: the patch on stdout) or ``--fix`` (the patch written,
    as chatter on stderr, so stdout keeps only the report) did, its summary, and one error
    line per file that could not be written; the same for ``audit`` and ``upgrade``."""
    if preview:
        sys.stdout.write(terminal_patch(diff))
    elif diff:
        out.chatter.print(
            terminal_patch(diff), markup=False, highlight=False, soft_wrap=True, end=""
        )
    out.chatter.print(terminal_line(summary), markup=False, soft_wrap=True)
    for failure in failures:
        out.warnings.print(f"kvtool: error: {terminal_line(failure)}", markup=False, soft_wrap=True)
