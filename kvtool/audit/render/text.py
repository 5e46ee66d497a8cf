"""The human report (``--output-format text``): one block per finding, via rich.

``file:line:col: [object: ]CODE severity message [name]`` then the fix, if any; the object
is the manifest's ``Kind/name container c`` or the compose service, as kube-linter names
it. The summary line is separate (:func:`summary`) because it goes to stderr.
"""

from __future__ import annotations

from collections import Counter

from rich.console import Console

from kvtool.audit.engine import AuditReport
from kvtool.audit.model import REWRITABLE, Finding, Severity
from kvtool.audit.render.objects import object_of
from kvtool.termsafe import plain, terminal_line

STYLES = {Severity.error: "bold red", Severity.warning: "yellow", Severity.info: "cyan"}
_NOUNS = {
    Severity.error: ("error", "errors"),
    Severity.warning: ("warning", "warnings"),
    Severity.info: ("info", "info"),
}


def _where(finding: Finding) -> str:
    loc = finding.location
    if loc is None or not loc.file:
        return finding.invocation or "argv"
    parts = [loc.file]
    if loc.line:
        parts.append(str(loc.line))
        if loc.column:
            parts.append(str(loc.column))
    return ":".join(parts)


def print_report(report: AuditReport, console: Console) -> None:
    # Input-derived text (file names, object names, flag values in messages) goes in as
    # plain pieces, never markup: control sequences shown escaped, brackets and
    # backslashes as written, in time linear in the text.
    for skipped in report.unreadable:
        console.print(
            plain((skipped.file, "bold"), ": ", ("not read", "bold red"), " ", skipped.reason),
            soft_wrap=True,
        )
    for finding in report.findings:
        style = STYLES[finding.severity]
        named = object_of(finding)
        console.print(
            plain(
                (_where(finding), "bold"),
                ": ",
                *((named, ""), ": ") if named else (),
                (finding.code, style),
                " ",
                (finding.severity.value, style),
                " ",
                finding.message,
                " ",
                (f"[{finding.name}]", "dim"),
            ),
            soft_wrap=True,
        )
        if finding.fix is not None:
            console.print(
                plain(
                    "    ",
                    (f"fix ({finding.fix.applicability}):", "dim"),
                    " ",
                    finding.fix.description,
                ),
                soft_wrap=True,
            )


def invocation_notes(report: AuditReport) -> list[str]:
    """What the readers could not map or chose to ignore, one line per note and invocation
    (``--verbose`` prints them to stderr; the JSON report carries them as ``notes``)."""
    return [
        terminal_line(f"kvtool: note: {invocation.label}: {note}")
        for invocation in report.invocations
        for note in dict.fromkeys(invocation.notes)
    ]


# Where each release was read, spelled out up to this many distinct (release, origin) pairs.
_ORIGINS_SHOWN = 3


def _fixable(report: AuditReport) -> dict[str, int]:
    """Findings ``--fix`` can edit away, by applicability (as ruff counts them): a token
    edit in an input kind that is rewritten in place."""
    kinds = {i.label: i.kind for i in report.invocations}
    counts = {"safe": 0, "unsafe": 0}
    for finding in report.findings:
        fix = finding.fix
        if fix is None or not fix.remove_tokens or fix.applicability not in counts:
            continue
        if kinds.get(finding.invocation or "") in REWRITABLE:
            counts[fix.applicability] += 1
    return counts


def summary(report: AuditReport) -> str:
    """One line: targets, counts per severity, suppressed count."""
    targets = sorted(
        {(i.target.vllm_version, i.target.origin or i.target.source) for i in report.invocations}
    )
    if len(targets) > _ORIGINS_SHOWN:  # a tree of many files: the kinds of source only
        targets = sorted({(i.target.vllm_version, i.target.source) for i in report.invocations})
    where = ", ".join(f"vLLM {version} ({origin})" for version, origin in targets) or "nothing"
    counts = report.counts()
    parts = [f"{counts[s.value]} {_NOUNS[s][counts[s.value] != 1]}" for s in reversed(Severity)]
    readers = Counter(i.kind for i in report.invocations)
    read_by = ", ".join(f"{kind} {count}" for kind, count in sorted(readers.items()))
    read_by = f" (read as {read_by})" if read_by else ""
    text = (
        f"Checked {len(report.invocations)} invocation(s){read_by} against {where}: "
        f"{', '.join(parts)}"
    )
    if report.suppressed:
        text += f", {report.suppressed} suppressed"
    if report.baselined:
        text += f", {report.baselined} in the baseline"
    fixable = _fixable(report)
    if fixable["safe"] or fixable["unsafe"]:
        text += f"; {fixable['safe']} fixable with --fix"
        if fixable["unsafe"]:
            text += f" ({fixable['unsafe']} more with --fix --unsafe-fixes)"
    never_read = sum(1 for s in report.skipped if s.never_read)
    passed_over = len(report.skipped) - len(report.unreadable) - never_read - len(report.unrendered)
    if passed_over:
        text += f"; {passed_over} file(s) skipped: no vLLM server (--verbose names them)"
    if never_read:
        text += (
            f"; {never_read} file(s) of kinds kvtool never reads (documentation, media, "
            "archives; --verbose names them)"
        )
    if report.unrendered:
        text += (
            f"; {len(report.unrendered)} chart template(s) not rendered: not audited "
            "(--verbose says why)"
        )
    if report.unreadable:
        text += f"; {len(report.unreadable)} file(s) could not be read"
    return text + "."
