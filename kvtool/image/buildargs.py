"""Decide ``INSTALL_KV_CONNECTORS`` from an image config's history.

The RUN line's ``|N K=v …`` prefix carries the *effective* build-arg value for every
builder (BuildKit old and new, the classic builder, buildah); the ARG line does not
(older BuildKit and the classic builder print the Dockerfile default, buildah prints
no value). So the last RUN-prefix value wins, a valued ARG line is only a fallback,
and ``N`` is never trusted: values contain spaces and buildah counts words.
"""

from __future__ import annotations

import re
from typing import Any

from kvtool.image.model import BuildFlag, FlagValue, HistoryEvidence, deciding_line

FLAG = "INSTALL_KV_CONNECTORS"
EXCERPT_CHARS = 200
# A RUN body that installs the connector requirements makes the evidence "strong".
_INSTALL_MARKERS = ("kv_connectors", "install-kv-connectors")
_RUN_VALUE_RE = re.compile(rf"(?<![\w$]){FLAG}=(\S+)")
_ARG_RE = re.compile(rf"(?:^|#\(nop\)\s+)ARG\s+{FLAG}(?:=(\S*))?")
_SHELL_SPLIT_RE = re.compile(r"\s-c\s")


def _created_by(entry: Any) -> str:
    if isinstance(entry, dict) and isinstance(entry.get("created_by"), str):
        return str(entry["created_by"])
    return ""


def _is_run(line: str) -> bool:
    return line.startswith(("RUN ", "|")) or ("/bin/sh -c" in line and "#(nop)" not in line)


def _strip_quotes(value: str) -> str:
    return value.strip("\"'")


def _evidence(index: int, line: str) -> HistoryEvidence | None:
    """The flag's value on one history line, if the line sets it."""
    if FLAG not in line:
        return None
    excerpt = line[:EXCERPT_CHARS]
    if _is_run(line):
        found = _RUN_VALUE_RE.search(_split_shell(line)[0])
        if found is None:
            return None  # the body tests or assigns the variable: not a build arg
        value = _strip_quotes(found.group(1))
        return HistoryEvidence(index=index, kind="run", value=value, excerpt=excerpt)
    arg = _ARG_RE.search(line)
    if arg is None:
        return None
    arg_value = _strip_quotes(arg.group(1)) if arg.group(1) else None
    return HistoryEvidence(index=index, kind="arg", value=arg_value, excerpt=excerpt)


def classify_build_flag(config: dict[str, Any]) -> BuildFlag:
    """The build flag's verdict with the history lines that decided it."""
    history = config.get("history")
    lines = [_created_by(e).strip() for e in history] if isinstance(history, list) else []
    evidence = [e for i, line in enumerate(lines) if (e := _evidence(i, line)) is not None]
    line = deciding_line(evidence)
    if line is None:
        return BuildFlag(value="unknown", decided_by="none", evidence=evidence)
    value = _truth(line.value or "")
    if line.kind == "arg":
        return BuildFlag(value=value, decided_by="arg-line", evidence=evidence)
    body = _split_shell(lines[line.index])[2]
    strong = any(marker in body for marker in _INSTALL_MARKERS)
    return BuildFlag(value=value, decided_by="run-prefix", strong=strong, evidence=evidence)


def _split_shell(line: str) -> tuple[str, str, str]:
    """Split a RUN line into the build-arg prefix and the shell body at the first `` -c ``."""
    match = _SHELL_SPLIT_RE.search(line)
    if not match:
        return line, "", ""
    return line[: match.start()], match.group(0), line[match.end() :]


def _truth(value: str) -> FlagValue:
    """The Dockerfile tests ``= "true"``: anything else installs nothing."""
    return "true" if value == "true" else "false"
