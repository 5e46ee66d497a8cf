"""NVIDIA Dynamo's vLLM worker, ``python3 -m dynamo.vllm ARGS``: vLLM engine arguments
plus Dynamo's own options.

The worker parses its own options first (``parse_known_args``) and gives every other
word to a parser of vLLM's engine arguments (``AsyncEngineArgs.add_cli_args``). So the
words vLLM reads are ARGS without Dynamo's options (``rules/dynamo/worker_options.json``,
generated from Dynamo's released wheels by ``scripts/gen_dynamo_options.py``), and the
invocation is a vLLM engine, not vLLM's OpenAI server (Dynamo's frontend serves HTTP).
"""

from __future__ import annotations

from functools import cache
from typing import Literal

import msgspec

from kvtool.errors import KvtoolError
from kvtool.resources import rules_dir

ENGINE_NOTE = (
    "NVIDIA Dynamo vLLM worker: Dynamo's own options were dropped and the rest read as "
    "vLLM engine arguments; vLLM's OpenAI-server options (--host, --port, --api-key...) "
    "do not apply to it, and the release tables do not tell them apart, so such an "
    "option is not reported"
)

Arity = Literal["one", "none", "negatable", "many", "optional"]


class _WorkerOption(msgspec.Struct, frozen=True):
    arity: Arity
    first: str  # the first and last Dynamo release read that has the option
    last: str


class _OptionTable(msgspec.Struct, frozen=True):
    options: dict[str, _WorkerOption]


@cache
def worker_options() -> dict[str, Arity]:
    """Dynamo's option spellings -> how many values each takes (a negatable switch's
    ``--no-X`` too), from the table scripts/gen_dynamo_options.py derives from its wheels."""
    path = rules_dir() / "dynamo" / "worker_options.json"
    try:
        table = msgspec.json.decode(path.read_bytes(), type=_OptionTable)
    except (OSError, msgspec.DecodeError) as exc:
        raise KvtoolError(f"Dynamo option table {path}: {exc}") from exc
    found: dict[str, Arity] = {}
    for name, option in table.options.items():
        found[name] = option.arity
        if option.arity == "negatable":
            found["--no-" + name.removeprefix("--")] = "none"
    return found


def engine_arguments(texts: list[str], start: int) -> list[int]:
    """Indexes of ``texts[start:]`` that vLLM's engine parser reads: Dynamo's options and
    their values taken out."""
    options = worker_options()
    kept: list[int] = []
    index = start
    while index < len(texts):
        name, has_value, _ = texts[index].partition("=")
        arity = options.get(name)
        index += 1
        if arity is None:
            kept.append(index - 1)
        elif has_value or arity in ("none", "negatable"):
            continue
        elif arity == "one":
            index += 1
        else:  # "many" takes values up to the next option, "optional" at most one
            limit = len(texts) if arity == "many" else min(index + 1, len(texts))
            while index < limit and not texts[index].startswith("-"):
                index += 1
    return kept
