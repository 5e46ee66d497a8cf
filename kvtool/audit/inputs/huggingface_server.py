"""KServe's Hugging Face server on the command line: its argv as the ``vllm serve`` argv it means.

``python -m huggingfaceserver ARGS`` (and a KServe predictor's ``args`` for that
server) parses its own options together with vLLM's and builds vLLM's engine
arguments from the result (kserve/kserve python/huggingfaceserver/huggingfaceserver
``__main__.py`` and ``vllm/utils.py``: ``AsyncEngineArgs.from_cli_args``), with
``args.model = model_id or model_dir``. So ``--model_id``/``--model_dir`` become the
model, ``--max_length`` and ``--model_revision`` the vLLM options they set, KServe's
model-server options are dropped, and ``--backend=huggingface`` or ``triton`` starts
no vLLM engine. This is the command-line layer: words in, words out, no YAML; the
manifest side (which predictor runs this server) is :mod:`.kserve`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Protocol, TypeVar

import msgspec

from kvtool.audit.inputs.command_line import ArgvWord
from kvtool.audit.model import Location, SourceToken


class _Worded(Protocol):
    @property
    def text(self) -> str: ...


# An argv word of a manifest's list (ArgvWord) or of a lexed command (SourceToken).
Word = TypeVar("Word", bound=_Worded)

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
