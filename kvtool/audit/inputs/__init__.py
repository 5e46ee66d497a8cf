"""Audit inputs: read serve configurations into ``Invocation``s that remember where each word was.

``read_inputs`` reads files (shell scripts, vLLM ``--config`` YAML, Kubernetes
manifests, docker compose files, KAITO ConfigMaps), detected by content unless
``input_format`` says otherwise, and the serve configurations inside directories;
``read_argv`` reads a command given as argv.
Malformed input raises ``KvtoolError`` naming the problem and file:line:col.
"""

from __future__ import annotations

from pathlib import Path

from kvtool.audit.inputs.argv import read_argv
from kvtool.audit.inputs.detect import FILE_FORMATS, detect_format
from kvtool.audit.inputs.discover import audited_kind, candidate_files
from kvtool.audit.inputs.shell import read_shell_file
from kvtool.audit.inputs.vllm_config import read_config_file
from kvtool.audit.model import Invocation
from kvtool.errors import KvtoolError
from kvtool.fsio import read_input_text


class NoServerCommand(KvtoolError):
    """An input that reads fine but starts no vLLM server."""


__all__ = [
    "FILE_FORMATS",
    "NoServerCommand",
    "detect_format",
    "read_argv",
    "read_inputs",
    "read_text",
]


def read_inputs(paths: list[Path], *, input_format: str | None = None) -> list[Invocation]:
    """Every vLLM invocation in ``paths``, in file order; a file with none is an error.

    A file named twice (``a.sh ./a.sh``, or by itself and inside a directory given too)
    is read once, as ruff does, so its findings and fixes are not doubled.
    """
    if input_format is not None and input_format not in FILE_FORMATS:
        raise KvtoolError(
            f"--input-format: unknown format {input_format!r} "
            f"(choose from {', '.join(FILE_FORMATS)})"
        )
    found: list[Invocation] = []
    seen: set[Path] = set()
    for path in paths:
        key = _resolved(path)
        if key in seen:
            continue
        if path.is_dir():
            found.extend(_read_directory(path, input_format, seen))
            continue
        seen.add(key)
        text = _read_file(path)
        found.extend(read_text(text, str(path), input_format=input_format, base_dir=path.parent))
    return found


def _read_file(path: Path) -> str:
    # Regular files (or - for stdin) only, within the input size limit: a FIFO or
    # /dev/zero must not hang the run or fill memory.
    return read_input_text(path)


def _resolved(path: Path) -> Path:
    try:
        return path.resolve()
    except (OSError, RuntimeError) as error:  # RuntimeError: a symlink loop (Python 3.11)
        raise KvtoolError(f"{path}: cannot resolve: {error}") from None


def _read_directory(
    directory: Path, input_format: str | None, seen: set[Path]
) -> list[Invocation]:
    """Invocations of the serve configurations found under ``directory`` (none: an error).

    Files that are not serve configurations, or not UTF-8 text, are passed over; files
    in ``seen`` were read already. Every file read is added to ``seen``.
    """
    seen.add(_resolved(directory))
    found: list[Invocation] = []
    looked_at = 0
    read_before = False
    for path in candidate_files(directory):
        looked_at += 1
        key = _resolved(path)
        if key in seen:
            read_before = True
            continue
        seen.add(key)
        try:
            text = read_input_text(path)
        except KvtoolError:
            continue
        kind = input_format or audited_kind(text, path.name)
        if kind is None:
            continue
        try:
            found.extend(read_text(text, str(path), input_format=kind, base_dir=path.parent))
        except NoServerCommand:
            continue  # e.g. a script that only mentions `vllm serve` in a comment
    if not found and not read_before:
        raise KvtoolError(
            f"{directory}: no vLLM serve configuration found in {looked_at} candidate file(s)"
        )
    return found


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
        raise NoServerCommand(f"{file or '<input>'}: no vLLM server command found (read as {kind})")
    return found
