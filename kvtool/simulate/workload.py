"""Workload traces for the simulator: requests that share prompt prefixes.

A trace is JSON Lines, one request per line::

    {"id": "r0", "arrival": 0, "prefix": "doc-3", "prefix_tokens": 2048,
     "suffix_tokens": 128, "output_tokens": 64}

``arrival`` is the scheduler step the request arrives at; requests with the same
``prefix`` share the KV of their first ``prefix_tokens`` tokens. The generator
mirrors ``vllm bench serve --dataset-name prefix_repetition``: N prefixes, each
request picks one at random and adds its own suffix.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kvtool import limits
from kvtool.errors import KvtoolError
from kvtool.fsio import read_input_text
from kvtool.nesting import loads_json


class TraceRequest(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    arrival: int = Field(default=0, ge=0)
    prefix: str
    prefix_tokens: int = Field(ge=0)
    suffix_tokens: int = Field(default=0, ge=0)
    output_tokens: int = Field(default=1, ge=1)

    @property
    def prompt_tokens(self) -> int:
        return self.prefix_tokens + self.suffix_tokens


def read_trace(path: Path) -> list[TraceRequest]:
    """Requests of a JSONL trace; a bad line is a KvtoolError naming file and line."""
    lines = read_input_text(path).splitlines()  # a regular file within the size limit
    requests: list[TraceRequest] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            requests.append(TraceRequest.model_validate(loads_json(line, f"{path}:{number}")))
        except json.JSONDecodeError as exc:
            raise KvtoolError(f"{path}:{number}: not JSON ({exc.msg})") from None
        except ValidationError as exc:
            first = exc.errors()[0]
            field = ".".join(str(p) for p in first["loc"]) or "request"
            raise KvtoolError(f"{path}:{number}: {field}: {first['msg']}") from None
        except ValueError as exc:  # an integer over Python's digit limit
            raise KvtoolError(f"{path}:{number}: not a usable request ({exc})") from None
    if not requests:
        raise KvtoolError(f"--trace {path}: no requests")
    ids = [r.id for r in requests]
    if len(set(ids)) != len(ids):
        raise KvtoolError(f"--trace {path}: request ids must be unique")
    return requests


def prefix_repetition(
    *,
    num_prefixes: int,
    prefix_tokens: int,
    suffix_tokens: int,
    output_tokens: int,
    num_requests: int,
    seed: int = 0,
) -> list[TraceRequest]:
    """Requests cycling through ``num_prefixes`` shared prefixes, all arriving at step 0."""
    if min(num_prefixes, num_requests, output_tokens) < 1 or min(prefix_tokens,
                                                                 suffix_tokens) < 0:
        raise KvtoolError("prefix repetition: counts must be >= 1 and token lengths >= 0")
    limits.SIMULATE_WORK.check(
        num_requests * (prefix_tokens + suffix_tokens + output_tokens),
        "prefix repetition: --num-requests x tokens per request",
    )
    rng = random.Random(seed)
    return [
        TraceRequest(
            id=f"r{i}",
            prefix=f"p{rng.randrange(num_prefixes)}",
            prefix_tokens=prefix_tokens,
            suffix_tokens=suffix_tokens,
            output_tokens=output_tokens,
        )
        for i in range(num_requests)
    ]
