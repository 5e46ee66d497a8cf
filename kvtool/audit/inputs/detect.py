"""Which reader an input file needs, decided from its content (the name only breaks ties)."""

from __future__ import annotations

import re
from pathlib import PurePath

from kvtool.errors import KvtoolError

FILE_FORMATS = ("shell", "vllm-config", "kubernetes", "compose", "kaito")

_K8S_HEAD = re.compile(r"^apiVersion:\s*\S", re.MULTILINE)
_K8S_KIND = re.compile(r"^kind:\s*([A-Za-z]+)", re.MULTILINE)
_JSON_MANIFEST = re.compile(r"\s*\{\s*\"(apiVersion|kind|items)\"")
_COMPOSE = re.compile(r"^services:\s*$", re.MULTILINE)
_YAML_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*:(\s|$)", re.MULTILINE)
VLLM_COMMAND = re.compile(r"\bvllm\s+serve\b|vllm\.entrypoints\.openai\.api_server")
SHELL_SUFFIXES = (".sh", ".bash", ".zsh", ".env", ".cmd")
YAML_SUFFIXES = (".yaml", ".yml")


def detect_format(text: str, filename: str | None = None) -> str:
    """One of ``FILE_FORMATS``; raises ``KvtoolError`` when the content fits none."""
    name = PurePath(filename or "").name.lower()
    if text.startswith("#!") or name.endswith(SHELL_SUFFIXES):
        return "shell"
    if _JSON_MANIFEST.match(text) and '"apiVersion"' in text:
        return "kubernetes"  # kubectl get -o json; JSON is YAML to the reader
    kinds = set(_K8S_KIND.findall(text))
    if _K8S_HEAD.search(text) and kinds:
        if kinds == {"ConfigMap"}:
            from kvtool.audit.inputs.kaito import is_inference_config

            if is_inference_config(_dedented_block_lines(text)):
                return "kaito"
        return "kubernetes"
    if _COMPOSE.search(text) or ("compose" in name and name.endswith(YAML_SUFFIXES)):
        return "compose"
    if VLLM_COMMAND.search(text) and not name.endswith(YAML_SUFFIXES):
        return "shell"
    if name.endswith(YAML_SUFFIXES) or _YAML_KEY.search(text):
        return "vllm-config"
    raise KvtoolError(
        f"{filename or '<input>'}: cannot tell what kind of input this is; "
        f"pass --input-format ({', '.join(FILE_FORMATS)})"
    )


def _dedented_block_lines(text: str) -> str:
    """Lines of embedded YAML blocks with their indentation removed, for a cheap key check."""
    return "\n".join(line.strip() for line in text.splitlines())
