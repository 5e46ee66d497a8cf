"""``kvtool upgrade --fix`` / ``--diff``: the audit's safe fixes for what the target release
rejects, then the image tag moved to the target release.

The token edits are the audit's own (:func:`kvtool.audit.fixing.apply_fixes`) applied to
the findings the invocations gain at the target. An environment variable the target
removed or deprecated in favour of a flag (the release index's ``replacement``, e.g.
``VLLM_PREFIX_CACHE_RETENTION_INTERVAL`` -> ``--prefix-cache-retention-interval``) becomes
that flag with the same value, added after the command's last word; in a shell script its
now idle ``NAME=value`` line is then dropped. The image is retagged where the file names
that same image: each word shaped like a reference is parsed (registry, repository, tag,
digest) and only one equal to the audited image, the one nearest the audited command,
gets the new tag; ``registry.example.com/team/vllm/vllm-openai:v0.31.0-bench`` is
another image than ``vllm/vllm-openai:v0.31.0`` and stays as it is.

A file that cannot be written (read-only, hard-linked, changed meanwhile) is a failure
of the run, reported one line each, never a silent "nothing to apply".
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
from kvtool.errors import KvtoolError
from kvtool.fsio import atomic_write, decode_text, read_input_bytes
from kvtool.image.reference import ImageReference, parse_reference
from kvtool.termsafe import terminal_line
from kvtool.upgrade.migrate import ENV_CODES
from kvtool.upgrade.plan import UpgradeReport
from kvtool.upgrade.render import as_audit_report


@dataclass
class UpgradeFixRun:
    diff: str = ""
    notes: list[str] = field(default_factory=list)
    still_breaks: bool = False
    failures: list[str] = field(default_factory=list)  # files left alone: why, one line each

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


# A run of the characters an image reference is written with (host, port, IPv6 brackets,
# path, tag, digest); quotes, blanks, ``=`` and ``,`` end it.
_REFERENCE_WORD = re.compile(r"[A-Za-z0-9._/:@\[\]-]+")


def _parsed(text: str) -> ImageReference | None:
    try:
        return parse_reference(text)
    except KvtoolError:
        return None


def _image_words(text: str, image: ImageReference) -> list[tuple[int, int, int]]:
    """(start, end, line) of each word of ``text`` that parses to ``image``."""
    name = image.repository.rsplit("/", 1)[-1]
    found = []
    for match in _REFERENCE_WORD.finditer(text):
        word = match.group().rstrip(":")  # a YAML key written as ``image:``-like word
        if name in word and _parsed(word) == image:
            start = match.start()
            found.append((start, start + len(word), text.count("\n", 0, start) + 1))
    return found


def _with_tag(word: str, tag: str) -> str:
    """``word`` (a reference) with its tag replaced, spelled otherwise as written."""
    name, at, digest = word.partition("@")
    colon = name.rfind(":")
    if colon > name.rfind("/"):
        name = name[:colon]
    return f"{name}:{tag}{at}{digest}"


def _retag(path: Path, old: str, new: str, lines: list[int | None], write: bool) -> str:
    """Retag ``old`` in ``path`` once per audited command (``lines``: where each starts,
    None for unknown): the equal reference nearest to it, or every one when unknown."""
    image, target = _parsed(old), _parsed(new)
    if image is None or target is None or target.tag is None:
        return ""
    data, text = _read_exactly(path)
    words = _image_words(text, image)
    chosen: set[tuple[int, int, int]] = set()
    for line in lines:
        if line is None:
            chosen.update(words)
        elif words:
            chosen.add(min(words, key=lambda word: (abs(word[2] - line), word[2])))
    changed = text
    for start, end, _ in sorted(chosen, reverse=True):
        changed = changed[:start] + _with_tag(changed[start:end], target.tag) + changed[end:]
    if changed == text:
        return ""
    if write:
        atomic_write(path, changed.encode("utf-8"), expected=data)
    shown = terminal_line(str(path))
    return "".join(
        difflib.unified_diff(
            text.splitlines(keepends=True),
            changed.splitlines(keepends=True),
            fromfile=shown,
            tofile=shown,
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
        if write:
            atomic_write(path, "".join(changed).encode("utf-8"), expected=data)
        shown = terminal_line(str(path))
        diff += "".join(difflib.unified_diff(lines, changed, fromfile=shown, tofile=shown))
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
    out = UpgradeFixRun(diff=run.diff, notes=[run.summary], failures=list(run.failures))
    shell = [
        f
        for inv in report.invocations
        if inv.kind == "shell"
        for f in inv.entered
        if f.code in ENV_CODES and f.fix is not None
    ]
    # --diff previews the token edits; the idle env lines go only when they are written.
    if write:
        try:
            out.diff += _drop_env_lines(shell, run.fixed_codes, write)
        except KvtoolError as error:
            out.failures.append(str(error))
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
    first_lines: dict[tuple[str, str, str], list[int | None]] = {}
    by_label = {inv.label: inv for inv in invocations}
    for inv in report.invocations:
        if inv.file and inv.image and inv.new_image and inv.kind in REWRITABLE:
            audited = by_label.get(inv.label)
            starts = [t.location.line for t in audited.tokens if t.location] if audited else []
            first_lines.setdefault((inv.file, inv.image, inv.new_image), []).append(
                min((line for line in starts if line), default=None)
            )
    for (file, old, new), lines in sorted(first_lines.items()):
        # A --diff preview shows the token fixes; the retag diff is against the same
        # original text, so both can be read, and --fix applies them one after the other.
        try:
            out.diff += _retag(Path(file), old, new, lines, write)
        except KvtoolError as error:
            out.failures.append(str(error))
            continue
        verb = "Retagged" if write else "Would retag"
        out.notes.append(f"{verb} {old} -> {new} in {file}.")
    return out
