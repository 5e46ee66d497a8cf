"""Find the serve configurations inside a directory given to ``kvtool audit``.

A directory is walked in name order. Candidates are shell scripts (by suffix, or a
shebang on a file without one) and YAML/JSON documents; hidden directories and
dependency trees are skipped. A candidate is audited when it reads as a shell script,
Kubernetes manifest or compose file that starts a vLLM server (``vllm serve`` or the
api_server module), or as a KAITO inference ConfigMap. Other YAML in a repository (CI
pipelines, Helm values) is never read as a vLLM ``--config`` file: such a file is
audited through the command that names it, or when given by path.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from kvtool.audit.inputs.detect import SHELL_SUFFIXES, VLLM_COMMAND, YAML_SUFFIXES, detect_format
from kvtool.errors import KvtoolError

_SKIPPED_DIRS = frozenset({"node_modules", "__pycache__", "site-packages", "venv"})
_DOCUMENT_SUFFIXES = (*YAML_SUFFIXES, ".json")


def candidate_files(directory: Path) -> Iterator[Path]:
    """Files under ``directory`` that may hold a serve configuration, in a stable order."""
    for root, dirs, files in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in _SKIPPED_DIRS)
        for name in sorted(files):
            path = Path(root) / name
            lowered = name.lower()
            if lowered.endswith((*SHELL_SUFFIXES, *_DOCUMENT_SUFFIXES)) or (
                "." not in name and _has_shebang(path)
            ):
                yield path


def audited_kind(text: str, name: str) -> str | None:
    """The input kind a discovered file is audited as, or None to pass over it."""
    try:
        kind = detect_format(text, name)
    except KvtoolError:
        return None
    if kind == "kaito" or (kind != "vllm-config" and VLLM_COMMAND.search(text)):
        return kind
    return None


def _has_shebang(path: Path) -> bool:
    try:
        with path.open("rb") as handle:
            return handle.read(2) == b"#!"
    except OSError:
        return False
