"""``kvtool upgrade --fix`` / ``--diff``: the audit's safe fixes for what the target release
rejects, then the image tag moved to the target release.

The token edits are the audit's own (:func:`kvtool.audit.fixing.apply_fixes`) applied to
the findings the invocations gain at the target; the image reference is replaced where
the file spells it exactly as the reader found it.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kvtool.audit.fix import REWRITABLE
from kvtool.audit.fixing import apply_fixes
from kvtool.audit.model import Invocation, Severity
from kvtool.upgrade.plan import UpgradeReport
from kvtool.upgrade.render import as_audit_report


@dataclass
class UpgradeFixRun:
    diff: str = ""
    notes: list[str] = field(default_factory=list)
    still_breaks: bool = False

    @property
    def summary(self) -> str:
        return " ".join(self.notes)


def _retag(path: Path, old: str, new: str, write: bool) -> str:
    text = path.read_text(encoding="utf-8")
    changed = text.replace(old, new)
    if changed == text:
        return ""
    if write:
        path.write_text(changed, encoding="utf-8")
    return "".join(
        difflib.unified_diff(
            text.splitlines(keepends=True),
            changed.splitlines(keepends=True),
            fromfile=str(path),
            tofile=str(path),
        )
    )


def apply_upgrade_fixes(
    invocations: Sequence[Invocation],
    report: UpgradeReport,
    *,
    write: bool,
    argv: Sequence[str] = (),
) -> UpgradeFixRun:
    """Apply (``write``) or preview the safe fixes and image retags of ``report``."""
    audit_report = as_audit_report(report)
    run = apply_fixes(invocations, audit_report, applicable=("safe",), write=write, argv=argv)
    out = UpgradeFixRun(diff=run.diff, notes=[run.summary])
    for inv in report.invocations:
        unfixed = [
            f
            for f in inv.entered
            if f.severity is Severity.error
            and (
                f.code,
                f.location.file if f.location else None,
                f.location.line if f.location else None,
            )
            not in run.fixed_codes
        ]
        if unfixed:
            out.still_breaks = True
            names = ", ".join(f"{f.code} {f.flag}" if f.flag else f.code for f in unfixed)
            out.notes.append(f"{inv.label}: still breaks at {inv.target.vllm_version} ({names}).")
    retagged = {
        (inv.file, inv.image, inv.new_image)
        for inv in report.invocations
        if inv.file and inv.image and inv.new_image and inv.kind in REWRITABLE
    }
    for file, old, new in sorted(retagged):
        # A --diff preview shows the token fixes; the retag diff is against the same
        # original text, so both can be read, and --fix applies them one after the other.
        out.diff += _retag(Path(file), old, new, write)
        verb = "Retagged" if write else "Would retag"
        out.notes.append(f"{verb} {old} -> {new} in {file}.")
    return out
