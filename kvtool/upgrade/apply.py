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

from kvtool.audit.fix import REWRITABLE
from kvtool.audit.fixing import FixedKey, apply_fixes
from kvtool.audit.model import Finding, Invocation, Severity
from kvtool.fsio import atomic_write, decode_text, read_input_bytes
from kvtool.upgrade.migrate import ENV_CODES
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


def _read_exactly(path: Path) -> tuple[bytes, str]:
    """The file's bytes and their text, undecoded line endings and all: an edit must
    leave every other byte as it was (``Path.read_text`` would turn CRLF into LF)."""
    data = read_input_bytes(path)
    return data, decode_text(data, path)


def _lines(text: str) -> list[str]:
    """``text`` split after each LF only, as the readers count lines (``splitlines``
    also splits at a lone CR, form feed and others, which would shift the numbers)."""
    return re.findall(r"[^\n]*\n|[^\n]+\Z", text)


def _retag(path: Path, old: str, new: str, write: bool) -> str:
    data, text = _read_exactly(path)
    changed = text.replace(old, new)
    if changed == text:
        return ""
    if write:
        atomic_write(path, changed.encode("utf-8"), expected=data)
    return "".join(
        difflib.unified_diff(
            text.splitlines(keepends=True),
            changed.splitlines(keepends=True),
            fromfile=str(path),
            tofile=str(path),
        )
    )


def _drop_env_lines(findings: Iterable[Finding], fixed: set[FixedKey], write: bool) -> str:
    """Drop each migrated env var's own ``[export ]NAME=value`` line from shell scripts."""
    diff = ""
    for finding in findings:
        loc = finding.location
        key = (finding.code, loc.file if loc else None, loc.line if loc else None)
        if loc is None or loc.file is None or loc.line is None or key not in fixed:
            continue
        path = Path(loc.file)
        data, text = _read_exactly(path)
        lines = _lines(text)
        own_line = re.compile(
            rf"[ \t]*(?:export[ \t]+)?{re.escape(finding.flag or '')}=\S*[ \t]*(?:#[^\r\n]*)?\r?\n?"
        )
        if loc.line > len(lines) or not own_line.fullmatch(lines[loc.line - 1]):
            continue
        changed = lines[: loc.line - 1] + lines[loc.line :]
        diff += "".join(difflib.unified_diff(lines, changed, fromfile=str(path), tofile=str(path)))
        if write:
            atomic_write(path, "".join(changed).encode("utf-8"), expected=data)
    return diff


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
    shell = [
        f
        for inv in report.invocations
        if inv.kind == "shell"
        for f in inv.entered
        if f.code in ENV_CODES and f.fix is not None
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
