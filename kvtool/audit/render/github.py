"""GitHub Actions workflow commands (``--output-format github``), one line per finding.

``::error file=deploy.yaml,line=42,col=5,title=SZ001 kv-offloading-size-per-rank::object: message``
(the object as the text report names it, when the input has one);
info findings become ``::notice``; a file that could not be read is an ``::error`` on that
file. Values are escaped as the runner expects.
"""

from __future__ import annotations

from kvtool.audit.engine import AuditReport
from kvtool.audit.model import Finding, Severity
from kvtool.audit.render.objects import object_of
from kvtool.termsafe import terminal_line

COMMANDS = {Severity.error: "error", Severity.warning: "warning", Severity.info: "notice"}


def _escape_data(text: str) -> str:
    # The runner's own escapes first (a newline stays one, as %0A); then every other
    # control or line-separating character is made visible: the runner's log is a terminal.
    escaped = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return terminal_line(escaped)


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def line(finding: Finding) -> str:
    props: list[str] = []
    loc = finding.location
    if loc is not None and loc.file:
        props.append(f"file={_escape_property(loc.file)}")
        if loc.line:
            props.append(f"line={loc.line}")
        if loc.column:
            props.append(f"col={loc.column}")
    props.append(f"title={_escape_property(f'{finding.code} {finding.name}')}")
    named = object_of(finding)
    message = f"{named}: {finding.message}" if named else finding.message
    return f"::{COMMANDS[finding.severity]} {','.join(props)}::{_escape_data(message)}"


def render(report: AuditReport) -> str:
    unreadable = "".join(
        f"::error file={_escape_property(s.file)},title=not read::{_escape_data(s.reason)}\n"
        for s in report.unreadable
    )
    return unreadable + "".join(line(f) + "\n" for f in report.findings)
