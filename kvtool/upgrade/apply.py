"""``kvtool upgrade --fix`` / ``--diff``: the audit's safe fixes for what the target release
rejects, then the image tag moved to the target release.

The token edits are the audit's own (:func:`kvtool.audit.fixing.apply_fixes`) applied to
the findings the invocations gain at the target. An environment variable the target
removed or deprecated in favour of a flag (the release index's ``replacement``, e.g.
``VLLM_PREFIX_CACHE_RETENTION_INTERVAL`` -> ``--prefix-cache-retention-interval``) becomes
that flag with the same value, added after the command's last word; in a shell script its
now idle ``NAME=value`` line is then dropped. The image reference is replaced where the
file spells it exactly as the reader found it.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from kvtool.audit.fix import REWRITABLE
from kvtool.audit.fixing import FixedKey, apply_fixes
from kvtool.audit.model import Finding, Fix, Invocation, Severity
from kvtool.releases import load_release, release_index
from kvtool.upgrade.plan import InvocationUpgrade, UpgradeReport
from kvtool.upgrade.render import as_audit_report

# Env var findings a flag can replace: removed (VG011) or deprecated (VG012) at the target.
_ENV_CODES = ("VG011", "VG012")
_FLAG = re.compile(r"--[a-z0-9][a-z0-9-]*")


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


def _env_to_flag(inv: InvocationUpgrade, invocation: Invocation) -> Iterable[Finding]:
    """The entered env var findings whose replacement is a value flag of the target,
    each given the fix that sets that flag to the env var's value."""
    if invocation.kind not in REWRITABLE or invocation.kind == "argv":
        return
    anchor = next((t for t in reversed(invocation.tokens) if not t.conditional), None)
    flags = {f.name: f for f in load_release(inv.target.vllm_version).flags}
    written = {t.text.split("=", 1)[0] for t in invocation.tokens}
    for finding in inv.entered:
        gate = release_index().env_vars.get(finding.flag or "")
        flag = gate.replacement if gate is not None else None
        if anchor is None or finding.code not in _ENV_CODES or flag is None:
            continue
        if not _FLAG.fullmatch(flag) or flag in written:
            continue
        if flag not in flags or flags[flag].value != "required":
            continue
        env = next((e for e in invocation.env if e.name == finding.flag), None)
        if env is None or env.value is None or env.conditional:
            continue
        choices = flags[flag].choices
        if choices is not None and env.value not in choices:
            continue  # the flag would reject the value: leave it to the finding
        fix = Fix(
            applicability="safe",
            description=f"set {flag} {env.value} instead of {env.name}",
            remove_tokens=(anchor,),
            replacement=(anchor.text, flag, env.value),
        )
        yield msgspec.structs.replace(finding, fix=fix)


def _drop_env_lines(findings: Iterable[Finding], fixed: set[FixedKey], write: bool) -> str:
    """Drop each migrated env var's own ``[export ]NAME=value`` line from shell scripts."""
    diff = ""
    for finding in findings:
        loc = finding.location
        key = (finding.code, loc.file if loc else None, loc.line if loc else None)
        if loc is None or loc.file is None or loc.line is None or key not in fixed:
            continue
        path = Path(loc.file)
        lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
        own_line = re.compile(
            rf"[ \t]*(?:export[ \t]+)?{re.escape(finding.flag or '')}=\S*[ \t]*(?:#.*)?\n?"
        )
        if loc.line > len(lines) or not own_line.fullmatch(lines[loc.line - 1]):
            continue
        changed = lines[: loc.line - 1] + lines[loc.line :]
        diff += "".join(difflib.unified_diff(lines, changed, fromfile=str(path), tofile=str(path)))
        if write:
            path.write_text("".join(changed), encoding="utf-8")
    return diff


def apply_upgrade_fixes(
    invocations: Sequence[Invocation],
    report: UpgradeReport,
    *,
    write: bool,
    argv: Sequence[str] = (),
) -> UpgradeFixRun:
    """Apply (``write``) or preview the safe fixes and image retags of ``report``."""
    by_label = {inv.label: inv for inv in invocations}
    migrations = {
        inv.label: list(_env_to_flag(inv, by_label[inv.label]))
        for inv in report.invocations
        if inv.label in by_label
    }
    audit_report = as_audit_report(report)
    for inv_report in audit_report.invocations:
        inv_report.findings += migrations.get(inv_report.label, [])
    run = apply_fixes(invocations, audit_report, applicable=("safe",), write=write, argv=argv)
    out = UpgradeFixRun(diff=run.diff, notes=[run.summary])
    shell = [
        f
        for inv in report.invocations
        if inv.kind == "shell"
        for f in migrations.get(inv.label, [])
    ]
    # --diff previews the token edits; the idle env lines go only when they are written.
    if write:
        out.diff += _drop_env_lines(shell, run.fixed_codes, write)
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
