"""KServe's Hugging Face runtime: the vLLM engine arguments hidden in its ``args``.

An InferenceService that says ``predictor.model.modelFormat.name: huggingface`` runs
KServe's ``huggingfaceserver`` (the ``kserve-huggingfaceserver`` ClusterServingRuntime,
kserve/kserve config/runtimes/kserve-huggingfaceserver.yaml), as does a ServingRuntime
container on a ``kserve/huggingfaceserver`` image that gives only ``args``. That server
parses its own options together with vLLM's (``make_arg_parser``) and builds vLLM's
engine arguments from the result (kserve/kserve python/huggingfaceserver/huggingfaceserver
``__main__.py`` and ``vllm/utils.py``: ``AsyncEngineArgs.from_cli_args``), with
``args.model = model_id or model_dir``. So its ``args`` are read as ``vllm serve``
arguments once the server's own options are taken out: ``--model_id``/``--model_dir``
become the model, ``--max_length`` and ``--model_revision`` the vLLM options they set,
and KServe's model-server options (``--model_name``, ``--http_port``...) are dropped.
``--backend=huggingface`` or ``triton`` starts no vLLM engine at all.

The same mapping applies where a command or script starts the server itself, ``python -m
huggingfaceserver ARGS`` (the multinode runtime's ``bash -c`` body, kserve/kserve
config/runtimes/kserve-huggingfaceserver-multinode.yaml); ``--model_dir``'s default is
then located at the ``python`` word.

The server reads its options with ``parse_known_args``: an option neither it nor vLLM
knows is ignored, not refused (a note says so).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Protocol, TypeVar

import msgspec
import yaml

from kvtool.audit.inputs import yaml_tree
from kvtool.audit.inputs.container import ArgvWord
from kvtool.audit.model import Location, SourceToken
from kvtool.releases.images import parse_image


class _Worded(Protocol):
    @property
    def text(self) -> str: ...


# An argv word of a manifest's list (ArgvWord) or of a lexed command (SourceToken).
Word = TypeVar("Word", bound=_Worded)

HUGGINGFACE_FORMAT = "huggingface"
VLLM_FORMAT = "vllm"
_SERVER_IMAGE = "huggingfaceserver"
DEFAULT_MODEL_DIR = "/mnt/models"  # where KServe's storage initializer puts storageUri

# The server's own options that take a value and set nothing of vLLM's
# (huggingfaceserver/__main__.py and kserve/model_server.py's parser).
_OWN_VALUE_OPTIONS = frozenset(
    {
        "--tokenizer_revision", "--tensor_input_names", "--task", "--max_log_len",
        "--max-log-len", "--http_port", "--grpc_port", "--workers", "--max_threads",
        "--max_asyncio_workers", "--enable_grpc", "--enable_docs_url",
        "--enable_latency_logging", "--configure_logging", "--log_config_file",
        "--access_log_format", "--model_name", "--predictor_host", "--protocol",
        "--predictor_protocol", "--predictor_use_ssl", "--predictor_request_timeout_seconds",
    }
)  # fmt: skip
_OWN_SWITCHES = frozenset(
    {
        "--disable_lower_case", "--disable_special_tokens", "--return_token_type_ids",
        "--return_probabilities", "--disable_log_requests",
    }
)  # fmt: skip
# The server's options that set a vLLM engine argument under another name.
_RENAMED = {"--max_length": "--max-model-len", "--model_revision": "--revision"}
_MODEL_OPTIONS = ("--model_id", "--model_dir")
_NOT_VLLM_BACKENDS = frozenset({"huggingface", "triton"})
IGNORED_NOTE = (
    "KServe's Hugging Face runtime reads its args with parse_known_args: an option it "
    "and vLLM do not know is ignored, not refused"
)


def model_format(node: yaml.Node) -> str | None:
    """``modelFormat.name`` of a KServe ``predictor.model``, lower-cased."""
    name = yaml_tree.scalar(yaml_tree.get_path(node, "modelFormat", "name"))
    return name.lower() if name is not None else None


def runs_huggingface_server(container: yaml.Node, image: str | None) -> bool:
    """A predictor model on the huggingface format, or an args-only container of the
    runtime's image (``kserve/huggingfaceserver:v0.15.0``)."""
    if model_format(container) == HUGGINGFACE_FORMAT:
        return True
    if image is None or yaml_tree.get(container, "command") is not None:
        return False
    return parse_image(image).repository.rsplit("/", 1)[-1] == _SERVER_IMAGE


def engine_argv(
    args: list[Word], default_model: Word, with_text: Callable[[Word, str], Word]
) -> list[Word] | None:
    """``vllm serve`` words equivalent to the runtime's ``args``; None when the args pick
    a backend that is not vLLM. ``default_model`` stands for ``--model_dir``'s default;
    ``with_text(word, text)`` is a word written where ``word`` is, reading ``text``."""
    options: dict[str, Word] = {}
    passed: list[Word] = []
    index = 0
    while index < len(args):
        word = args[index]
        name, has_value, value = word.text.partition("=")
        own = name in _OWN_VALUE_OPTIONS or name in _RENAMED or name in _MODEL_OPTIONS
        if name == "--backend" or own:
            given = with_text(word, value)
            if not has_value and index + 1 < len(args):
                index += 1
                given = args[index]
            options[name] = given
            if name in _RENAMED:
                passed.append(with_text(word, _RENAMED[name]))
                passed.append(options[name])
        elif name not in _OWN_SWITCHES:
            passed.append(word)
        index += 1
    backend = options.get("--backend")
    if backend is not None and backend.text in _NOT_VLLM_BACKENDS:
        return None
    model = options.get("--model_id") or options.get("--model_dir") or default_model
    return [model, *passed]


def default_model_word(node: yaml.Node, file: str | None) -> ArgvWord:
    """``--model_dir``'s default, located at ``storageUri`` (what is downloaded there)."""
    storage = yaml_tree.get(node, "storageUri")
    where = storage if storage is not None else node
    return ArgvWord(DEFAULT_MODEL_DIR, yaml_tree.location(where, file))


def server_tokens(
    tokens: list[SourceToken], program: Location | None
) -> tuple[list[SourceToken], tuple[str, ...]] | None:
    """``python -m huggingfaceserver ARGS`` in a command or script: the ``vllm serve``
    words its ARGS stand for, and the report's notes; None when they pick a backend that
    is not vLLM. ``--model_dir``'s default is located at the ``python`` word."""
    default = SourceToken(text=DEFAULT_MODEL_DIR, location=program)
    mapped = engine_argv(tokens, default, _token_with_text)
    return None if mapped is None else (mapped, (IGNORED_NOTE,))


def argv_word_with_text(word: ArgvWord, text: str) -> ArgvWord:
    return replace(word, text=text, span=None)


def _token_with_text(token: SourceToken, text: str) -> SourceToken:
    return msgspec.structs.replace(token, text=text)
