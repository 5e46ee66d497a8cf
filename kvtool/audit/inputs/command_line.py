"""Find the ``vllm serve`` call inside one command's words.

Operators start vLLM in many wrappings: ``vllm serve M``, ``exec vllm serve``,
``python3 -m vllm.entrypoints.openai.api_server``, KAITO's ``python3
/workspace/vllm/inference_api.py``, ``docker run ... IMAGE vllm serve``, an image
whose entrypoint already is ``vllm serve`` (``docker run IMAGE --model M``), or
``sh -c "vllm serve ..."``. This module only decides which words are the serve
arguments, the environment and the image; readers attach locations.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

import msgspec

from kvtool.audit.model import Location


@dataclass(frozen=True)
class ArgvWord:
    """One argv word as a reader found it: its text, where it was written and, when the
    reader knows it, the offsets of its written form in the source text."""

    text: str
    location: Location | None
    span: tuple[int, int] | None = None


_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_PYTHON = re.compile(r"python(\d+(\.\d+)?)?")
_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ash"})
_CONTAINER_CLIS = frozenset({"docker", "podman", "nerdctl"})
# Commands that only mention vLLM ("echo starting vllm serve"): never a server start.
_MENTIONING = frozenset({"echo", "printf", "logger", "grep", "pgrep", "pkill", "ps", "which"})
# The OpenAI server module: serve arguments follow it directly (no "serve" word).
API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"
# vLLM's demo HTTP server (POST /generate), which older deployments and KServe's vLLM
# example start (https://github.com/vllm-project/vllm/blob/v0.6.3/vllm/entrypoints/api_server.py:
# --host/--port/--ssl-*/--root-path/--log-level, then AsyncEngineArgs.add_cli_args).
LEGACY_API_SERVER_MODULE = "vllm.entrypoints.api_server"
LEGACY_API_SERVER_NOTE = (
    "vllm.entrypoints.api_server (vLLM's demo server) reads the engine's arguments and a few "
    "of its own; they are checked against the OpenAI server's flags, which are more: an "
    "OpenAI-server-only flag (--api-key, --chat-template) is not reported"
)
CLI_MAIN_MODULE = "vllm.entrypoints.cli.main"
# NVIDIA Dynamo's vLLM worker (see .dynamo; named here so detection needs no table).
DYNAMO_WORKER_MODULE = "dynamo.vllm"
# KServe's Hugging Face runtime server, which runs vLLM's engine (see .kserve).
HUGGINGFACE_SERVER_MODULE = "huggingfaceserver"
# `docker run` options that size the container's memory and /dev/shm.
CONTAINER_SIZING_OPTIONS = frozenset({"--shm-size", "--ipc", "-m", "--memory"})
# `docker run` options that take a separate value; everything else is a bare switch.
_DOCKER_VALUE_OPTIONS = frozenset(
    {
        "-e", "--env", "--env-file", "-v", "--volume", "-p", "--publish", "--name", "--gpus",
        "--ipc", "--network", "--net", "--shm-size", "-w", "--workdir", "--entrypoint", "-u",
        "--user", "--runtime", "--device", "--mount", "-l", "--label", "--cpus", "-m",
        "--memory", "--platform", "--ulimit", "--cap-add", "--cap-drop", "--security-opt",
        "--restart", "--add-host", "-h", "--hostname", "--pull", "--log-driver", "--log-opt",
        "--cpuset-cpus", "--pid", "--userns", "--tmpfs", "--group-add", "--health-cmd",
        "--memory-swap", "--stop-signal", "--stop-timeout", "--cidfile", "--dns",
    }
)  # fmt: skip


# KAITO's vLLM server wrapper, started as `python3 /workspace/vllm/inference_api.py ARGS`
# (kaito-project/kaito pkg/utils/consts DefaultVLLMCommand): vLLM's own parser reads
# every argument but KAITO's `--kaito-*` options, which all take a value
# (presets/workspace/inference/vllm/inference_api.py, KAITOArgumentParser).
KAITO_SERVER = ("vllm", "inference_api.py")
KAITO_OPTION_PREFIX = "--kaito-"


class ServeMatch(msgspec.Struct, frozen=True):
    """Where the serve arguments start in a word list, and what surrounds them."""

    kind: Literal["serve", "api_server", "image_entrypoint", "shell"]
    args_start: int  # index of the first serve argument (or, for "shell", of the script)
    program: int  # index of the word that starts vLLM (or the shell)
    env: dict[int, str] = msgspec.field(default_factory=dict)  # word index -> "NAME=value"
    image: str | None = None
    # ``docker run`` options that size the container (--shm-size, --ipc, -m/--memory):
    # index of the word holding the value (``--ipc=host`` itself, or the word after) -> option.
    container_options: dict[int, str] = msgspec.field(default_factory=dict)
    # Options of a wrapper around vLLM's server that vLLM never sees (each with a value).
    wrapper_option_prefix: str | None = None
    # A wrapper whose own options come from a table (NVIDIA Dynamo's vLLM worker).
    dynamo_worker: bool = False
    # KServe's Hugging Face server (``python -m huggingfaceserver``): its options are
    # mapped to vLLM's by .kserve after the words are read.
    huggingface_server: bool = False
    note: str | None = None  # what the report should say about this kind of start


def serve_arguments(texts: list[str], match: ServeMatch) -> list[int]:
    """Indexes of the words vLLM's parser reads: ``texts[match.args_start:]`` without the
    wrapper's own options and their values."""
    if match.dynamo_worker:
        from kvtool.audit.inputs.dynamo import engine_arguments

        return engine_arguments(texts, match.args_start)
    prefix = match.wrapper_option_prefix
    kept: list[int] = []
    index = match.args_start
    while index < len(texts):
        word = texts[index]
        if prefix is not None and word.startswith(prefix):
            index += 1 if "=" in word else 2
            continue
        kept.append(index)
        index += 1
    return kept


def basename(word: str) -> str:
    return word.rsplit("/", 1)[-1]


def find_serve(words: list[str], start: int = 0) -> ServeMatch | None:
    """The first vLLM server start in ``words[start:]``, or None."""
    first = next((w for w in words[start:] if not _is_assignment(w)), None)
    if first is not None and basename(first) in _MENTIONING:
        return None
    index = start
    while index < len(words):
        match = _match_at(words, index)
        if match is not None:
            env = {
                i: w for i, w in enumerate(words[start : match.program], start) if _is_assignment(w)
            }
            return msgspec.structs.replace(match, env={**env, **match.env})
        index += 1
    return None


def _is_assignment(word: str) -> bool:
    return bool(_ASSIGNMENT.match(word))


def _match_at(words: list[str], index: int) -> ServeMatch | None:
    word = basename(words[index])
    following = words[index + 1] if index + 1 < len(words) else None
    if word == "vllm" and following == "serve":
        return ServeMatch("serve", index + 2, index)
    module_at = _module_option(words, index) if _PYTHON.fullmatch(word) else None
    if module_at is not None:
        module = words[module_at]
        if module == API_SERVER_MODULE:
            return ServeMatch("api_server", module_at + 1, index)
        if module == LEGACY_API_SERVER_MODULE:
            return ServeMatch("api_server", module_at + 1, index, note=LEGACY_API_SERVER_NOTE)
        if module == DYNAMO_WORKER_MODULE:
            from kvtool.audit.inputs.dynamo import ENGINE_NOTE

            return ServeMatch(
                "api_server", module_at + 1, index, dynamo_worker=True, note=ENGINE_NOTE
            )
        if module == HUGGINGFACE_SERVER_MODULE:
            return ServeMatch("api_server", module_at + 1, index, huggingface_server=True)
        if module == CLI_MAIN_MODULE and words[module_at + 1 : module_at + 2] == ["serve"]:
            return ServeMatch("serve", module_at + 2, index)
    if _PYTHON.fullmatch(word) and following is not None and _is_kaito_server(following):
        return ServeMatch("api_server", index + 2, index, wrapper_option_prefix=KAITO_OPTION_PREFIX)
    if word in _SHELLS:
        for script_index in range(index + 1, len(words) - 1):
            option = words[script_index]
            if not option.startswith("-"):
                break
            if "c" in option.lstrip("-") and not option.startswith("--"):
                return ServeMatch("shell", script_index + 1, index)
    if word in _CONTAINER_CLIS and following == "run":
        return _match_container_run(words, index)
    return None


# The interpreter's own options that may stand before `-m MODULE` (`python -u -m ...`,
# https://docs.python.org/3/using/cmdline.html): switches, and the two that take a value.
_PYTHON_SWITCHES = re.compile(r"-[bBdEhiIOPqsSuvx]+")
_PYTHON_VALUE_OPTIONS = frozenset({"-X", "-W"})


def _module_option(words: list[str], index: int) -> int | None:
    """The index of the module that ``python [options] -m MODULE`` at ``index`` runs."""
    position = index + 1
    while position + 1 < len(words):
        option = words[position]
        if option == "-m":
            return position + 1
        if option in _PYTHON_VALUE_OPTIONS:
            position += 2
        elif _PYTHON_SWITCHES.fullmatch(option):
            position += 1
        else:
            return None
    return None


def _is_kaito_server(path: str) -> bool:
    return tuple(path.rsplit("/", 2)[-2:]) == KAITO_SERVER


def _match_container_run(words: list[str], index: int) -> ServeMatch | None:
    env: dict[int, str] = {}
    sizing: dict[int, str] = {}
    position = index + 2
    entrypoint: str | None = None
    while position < len(words):
        word = words[position]
        if word == "--":
            position += 1
            break
        if not word.startswith("-"):
            break
        name, has_value, value = word.partition("=")
        if name in CONTAINER_SIZING_OPTIONS:
            sizing[position if has_value else position + 1] = name
        if name in _DOCKER_VALUE_OPTIONS and not has_value:
            value = words[position + 1] if position + 1 < len(words) else ""
            if name in ("-e", "--env") and _is_assignment(value):
                env[position + 1] = value
            if name == "--entrypoint":
                entrypoint = value
            position += 2
            continue
        if name in ("-e", "--env") and has_value and _is_assignment(value):
            env[position] = value
        if name == "--entrypoint" and has_value:
            entrypoint = value
        position += 1
    if position >= len(words):
        return None
    image = words[position]
    inner = find_serve(words, position + 1)
    if inner is not None:
        return msgspec.structs.replace(
            inner, env={**env, **inner.env}, image=image, container_options=sizing
        )
    from kvtool.releases.images import serve_entrypoint

    if entrypoint is None and serve_entrypoint(image) is not None:
        return ServeMatch("image_entrypoint", position + 1, position, env, image, sizing)
    return None
