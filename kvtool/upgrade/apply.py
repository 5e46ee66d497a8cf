"""``kvtool upgrade --fix`` / ``--diff``: the audit's safe fixes for every error the target
release reports, then the image tag moved to the target release.

The token edits are the audit's own (:func:`kvtool.audit.fix_plan.plan_fixes`) applied to
every finding the invocations have at the target, whichever release it entered at. An
environment variable the target removed or deprecated in favour of a flag (the release
index's ``replacement``, e.g. ``VLLM_PREFIX_CACHE_RETENTION_INTERVAL`` ->
``--prefix-cache-retention-interval``) becomes that flag with the same value, added after
the command's last word; in a shell script its now idle ``NAME=value`` line is then
dropped. The image is retagged where the file names that same image: each word shaped
like a reference is parsed (registry, repository, tag, digest) and only one equal to the
audited image, the one nearest the audited command, gets the new tag;
``registry.example.com/team/vllm/vllm-openai:v0.31.0-bench`` is another image than
``vllm/vllm-openai:v0.31.0`` and stays as it is. All three edits go into one
:class:`~kvtool.audit.fix_plan.EditPlan`, so ``--diff`` shows exactly what ``--fix`` writes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from kvtool.audit.fix_plan import EditPlan, FixedKey, finish, plan_fixes
from kvtool.audit.model import REWRITABLE, Finding, Invocation
from kvtool.errors import KvtoolError
from kvtool.image.reference import ImageReference, parse_reference
from kvtool.upgrade.migrate import ENV_CODES
from kvtool.upgrade.plan import UpgradeReport
from kvtool.upgrade.render import as_audit_report


@dataclass
class UpgradeFixRun:
    diff: str = ""
    notes: list[str] = field(default_factory=list)
    still_breaks: bool = False
    failures: list[str] = field(default_factory=list)  # files that could not be written

    @property
    def summary(self) -> str:
        return " ".join(self.notes)


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


def _retagged(text: str, old: str, new: str, lines: list[int | None]) -> str:
    """``text`` with ``old`` retagged once per audited command (``lines``: the line each
    starts at, None when unknown): the equal reference nearest it, or all when unknown."""
    image, target = _parsed(old), _parsed(new)
    if image is None or target is None or target.tag is None:
        return text
    words = _image_words(text, image)
    chosen: set[tuple[int, int, int]] = set()
    for line in lines:
        if line is None:
            chosen.update(words)
        elif words:
            chosen.add(min(words, key=lambda word: (abs(word[2] - line), word[2])))
    for start, end, _ in sorted(chosen, reverse=True):
        text = text[:start] + _with_tag(text[start:end], target.tag) + text[end:]
    return text


def _retag(plan: EditPlan, file: str, old: str, new: str, lines: list[int | None]) -> bool:
    return plan.edit(file, lambda text: _retagged(text, old, new, lines))


def _first_lines(
    invocations: Sequence[Invocation], report: UpgradeReport
) -> dict[tuple[str, str, str], list[int | None]]:
    """(file, image, new image) -> the line each audited command using it starts at."""
    by_label = {inv.label: inv for inv in invocations}
    found: dict[tuple[str, str, str], list[int | None]] = {}
    for inv in report.invocations:
        if inv.file and inv.image and inv.new_image and inv.kind in REWRITABLE:
            audited = by_label.get(inv.label)
            starts = [t.location.line for t in audited.tokens if t.location] if audited else []
            found.setdefault((inv.file, inv.image, inv.new_image), []).append(
                min((line for line in starts if line), default=None)
            )
    return found


def _drop_env_lines(plan: EditPlan, findings: Iterable[Finding], fixed: set[FixedKey]) -> None:
    """Drop each migrated env var's own ``[export ]NAME=value`` line from shell scripts."""
    for finding in findings:
        loc = finding.location
        key = (finding.code, loc.file if loc else None, loc.line if loc else None)
        if loc is None or loc.file is None or loc.line is None or key not in fixed:
            continue
        line = loc.line
        own_line = re.compile(
            rf"[ \t]*(?:export[ \t]+)?{re.escape(finding.flag or '')}=\S*[ \t]*(?:#[^\r\n]*)?\r?\n?"
        )

        def drop(text: str, line: int = line, own_line: re.Pattern[str] = own_line) -> str:
            lines = _lines(text)
            if line > len(lines) or not own_line.fullmatch(lines[line - 1]):
                return text
            return "".join(lines[: line - 1] + lines[line:])

        plan.edit(loc.file, drop)


def apply_upgrade_fixes(
    invocations: Sequence[Invocation],
    report: UpgradeReport,
    *,
    write: bool,
    argv: Sequence[str] = (),
) -> UpgradeFixRun:
    """Apply (``write``) or preview the safe fixes and image retags of ``report``."""
    plan = EditPlan()
    run = plan_fixes(
        plan, invocations, as_audit_report(report), applicable=("safe",), argv=argv, write=write
    )
    shell = [
        f
        for inv in report.invocations
        if inv.kind == "shell"
        for f in inv.at_target
        if f.code in ENV_CODES and f.fix is not None
    ]
    _drop_env_lines(plan, shell, run.fixed_codes)
    retag_notes = []
    for (file, old, new), lines in sorted(_first_lines(invocations, report).items()):
        if _retag(plan, file, old, new, lines):
            verb = "Retagged" if write else "Would retag"
            retag_notes.append((file, f"{verb} {old} -> {new} in {file}."))
    failed = finish(run, plan)
    out = UpgradeFixRun(diff=run.diff, notes=[run.summary], failures=list(run.failures))
    out.notes.extend(note for file, note in retag_notes if file not in failed)
    for inv in report.invocations:
        unfixed = [
            f
            for f in inv.target_errors
            if (
                f.code,
                f.location.file if f.location else None,
                f.location.line if f.location else None,
            )
            not in run.fixed_codes
        ]
        if unfixed:
            out.still_breaks = True
            names = ", ".join(f"{f.code} {f.flag}" if f.flag else f.code for f in unfixed)
            out.notes.append(
                f"{inv.label}: still does not start at {inv.target.vllm_version} ({names})."
            )
    return out
