"""Audit inputs: read serve configurations into ``Invocation``s that remember where each word was.

``read_inputs`` reads files (shell scripts, vLLM ``--config`` YAML, Kubernetes
manifests, docker compose files, KAITO ConfigMaps), detected by content unless
``input_format`` says otherwise; ``read_argv`` reads a command given as argv.
Malformed input raises ``KvtoolError`` naming the problem and file:line:col.
"""

from __future__ import annotations

from pathlib import Path

from kvtool.audit.inputs.argv import read_argv
from kvtool.audit.inputs.detect import FILE_FORMATS, detect_format
from kvtool.audit.inputs.shell import read_shell_file
from kvtool.audit.inputs.vllm_config import read_config_file
from kvtool.audit.model import Invocation
from kvtool.errors import KvtoolError

__all__ = ["FILE_FORMATS", "detect_format", "read_argv", "read_inputs", "read_text"]


def read_inputs(paths: list[Path], *, input_format: str | None = None) -> list[Invocation]:
    """Every vLLM invocation in ``paths``, in file order; a file with none is an error.

    A file named twice (``a.sh ./a.sh``) is read once, as ruff does, so its findings
    and fixes are not doubled.
    """
    if input_format is not None and input_format not in FILE_FORMATS:
        raise KvtoolError(
            f"--input-format: unknown format {input_format!r} "
            f"(choose from {', '.join(FILE_FORMATS)})"
        )
    found: list[Invocation] = []
    for path in _distinct(paths):
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise KvtoolError(f"{path}: no such file") from None
        except (OSError, UnicodeDecodeError) as error:
            raise KvtoolError(f"{path}: cannot read: {error}") from None
        found.extend(read_text(text, str(path), input_format=input_format, base_dir=path.parent))
    return found


def _distinct(paths: list[Path]) -> list[Path]:
    seen: set[Path] = set()
    kept: list[Path] = []
    for path in paths:
        key = path.resolve()
        if key not in seen:
            seen.add(key)
            kept.append(path)
    return kept


def read_text(
    text: str,
    file: str | None,
    *,
    input_format: str | None = None,
    base_dir: Path | None = None,
) -> list[Invocation]:
    """The invocations in one input's text (``file`` names it in locations and errors)."""
    kind = input_format or detect_format(text, file)
    # The YAML-document readers (and PyYAML) load only for inputs that need them.
    if kind == "shell":
        found = read_shell_file(text, file, base_dir)
    elif kind == "vllm-config":
        found = read_config_file(text, file)
    elif kind == "kubernetes":
        from kvtool.audit.inputs.kubernetes import read_manifests

        found = read_manifests(text, file, base_dir)
    elif kind == "compose":
        from kvtool.audit.inputs.compose import read_compose

        found = read_compose(text, file, base_dir)
    elif kind == "kaito":
        from kvtool.audit.inputs.kaito import read_kaito

        found = read_kaito(text, file)
    else:
        raise KvtoolError(f"--input-format: unknown format {kind!r}")
    if not found:
        raise KvtoolError(f"{file or '<input>'}: no vLLM server command found (read as {kind})")
    return found
