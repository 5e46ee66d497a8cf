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

from kvtool.image.model import BuildFlag, FlagValue, HistoryEvidence

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


def classify_build_flag(config: dict[str, Any]) -> BuildFlag:
    """The build flag's verdict with the history lines that decided it."""
    history = config.get("history")
    entries = history if isinstance(history, list) else []
    evidence: list[HistoryEvidence] = []
    run_value: str | None = None
    run_strong = False
    arg_value: str | None = None
    for index, entry in enumerate(entries):
        line = _created_by(entry).strip()
        if FLAG not in line:
            continue
        excerpt = line[:EXCERPT_CHARS]
        if _is_run(line):
            prefix, _, body = _split_shell(line)
            found = _RUN_VALUE_RE.search(prefix)
            if found:
                value = _strip_quotes(found.group(1))
                evidence.append(
                    HistoryEvidence(index=index, kind="run", value=value, excerpt=excerpt)
                )
                run_value = value
                run_strong = any(marker in body for marker in _INSTALL_MARKERS)
            continue
        arg = _ARG_RE.search(line)
        if arg:
            arg_text = _strip_quotes(arg.group(1)) if arg.group(1) else None
            evidence.append(
                HistoryEvidence(index=index, kind="arg", value=arg_text, excerpt=excerpt)
            )
            arg_value = arg_text or arg_value
    if run_value is not None:
        return BuildFlag(
            value=_truth(run_value), decided_by="run-prefix", strong=run_strong, evidence=evidence
        )
    if arg_value is not None:
        return BuildFlag(value=_truth(arg_value), decided_by="arg-line", evidence=evidence)
    return BuildFlag(value="unknown", decided_by="none", evidence=evidence)


def _split_shell(line: str) -> tuple[str, str, str]:
    """Split a RUN line into the build-arg prefix and the shell body at the first `` -c ``."""
    match = _SHELL_SPLIT_RE.search(line)
    if not match:
        return line, "", ""
    return line[: match.start()], match.group(0), line[match.end() :]


def _truth(value: str) -> FlagValue:
    """The Dockerfile tests ``= "true"``: anything else installs nothing."""
    return "true" if value == "true" else "false"
