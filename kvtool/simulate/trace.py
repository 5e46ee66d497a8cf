"""Workload traces with multi-level prefixes: the format ``kvtool simulate --trace`` reads.

A trace is JSON Lines. The first line may be a header naming the format version
and what made the trace; every other line is one request::

    {"kvtool_trace": 2, "workload": "chat", "seed": 0, "params": {"conversations": 4}}
    {"id": "c0t0", "arrival": 0, "segments": [{"key": "sys0", "tokens": 512},
     {"key": "c0/u0", "tokens": 64}], "output_tokens": 32, "output_key": "c0/a0"}
    {"id": "c0t1", "after": "c0t0", "arrival": 3, "segments": [{"key": "sys0", "tokens": 512},
     {"key": "c0/u0", "tokens": 64}, {"key": "c0/a0", "tokens": 32},
     {"key": "c0/u1", "tokens": 48}], "output_tokens": 32, "output_key": "c0/a1"}

A prompt is a list of **segments**: a key names the segment's content and its
token count (the same key always has the same length). Two requests share the
KV of their prompts up to the first segment where their lists differ, the way
vLLM's prefix cache chains block hashes over every token before: a document
after system prompt A and the same document after system prompt B share no KV.
So one list expresses every level of sharing: a system prompt shared by all, a
document shared by the requests that read it, a conversation's earlier turns
shared by its later ones.

``arrival`` is the scheduler step at which the request arrives; with ``after``
it counts the steps after that (earlier) request finished instead, as a chat
user answers a reply. ``output_key`` names the tokens the request generates:
a later prompt that lists a segment with that key (and ``output_tokens``
tokens) continues this request's KV, decode-filled blocks included. An engine
replaying such a trace must put the generated tokens there (see
:func:`segment_token_ids`); a trace whose later prompts use canned replies
instead gives their segments keys of their own.

The JSON Schema is ``docs/schemas/trace.schema.json`` (``scripts/gen_schemas.py``).
Version 1 lines (``prefix``, ``prefix_tokens``, ``suffix_tokens``, no header) are
still read: the prefix is one shared segment and the suffix one of the request's own.

The generators (:data:`WORKLOADS`) are seeded and lazy: they yield requests in
the order a reader must see them (every ``after`` names an earlier request, and
requests without one come in non-decreasing ``arrival``), so a million-request
workload is simulated without being held in memory.
"""

from __future__ import annotations

import itertools
import json
import random
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kvtool.errors import KvtoolError
from kvtool.fsio import read_input_text
from kvtool.nesting import loads_json

TRACE_VERSION: Literal[2] = 2
MAX_TOKENS = 1 << 24
"""Tokens of one segment or one output: far beyond any model's context length, and
small enough that a step count derived from them stays exact."""
MAX_SEGMENTS = 4096
_KEY = Field(min_length=1, max_length=256)


class Segment(NamedTuple):
    """A run of prompt tokens named by its content."""

    key: str
    tokens: int


class _RequestFields(NamedTuple):
    id: str
    segments: tuple[Segment, ...]
    output_tokens: int
    arrival: int
    after: str | None
    output_key: str | None
    dependents: int
    """How many later requests name this one in ``after`` (not written: derived)."""
    prompt_tokens: int
    """The segments' tokens, summed once (read on every scheduling decision)."""


class Request(_RequestFields):
    """One request as the simulator replays it (validated; see the module docstring).

    An immutable tuple, not a frozen dataclass: a million-request replay builds one per
    request in every process, and a frozen dataclass's ``__init__`` cost three times as
    much. ``prompt_tokens`` is derived, never passed.
    """

    __slots__ = ()

    def __new__(cls, id: str, segments: tuple[Segment, ...], output_tokens: int,
                arrival: int = 0, after: str | None = None, output_key: str | None = None,
                dependents: int = 0) -> Request:
        tokens = 0
        for segment in segments:
            tokens += segment[1]
        return tuple.__new__(cls, (id, segments, output_tokens, arrival, after, output_key,
                                   dependents, tokens))

    def __getnewargs__(self) -> tuple[Any, ...]:  # pickled by its constructor arguments
        return tuple(self[:7])


# --------------------------------------------------------------------------- the file format


class SegmentLine(BaseModel):
    model_config = ConfigDict(extra="forbid", title="Segment")

    key: str = _KEY
    tokens: int = Field(ge=1, le=MAX_TOKENS)


class RequestLine(BaseModel):
    """A request line of a version 2 trace."""

    model_config = ConfigDict(extra="forbid", title="Request")

    id: str = _KEY
    arrival: int = Field(default=0, ge=0, le=MAX_TOKENS,
                         description="Scheduler step it arrives at; with 'after', steps "
                                     "after that request finished.")
    after: str | None = Field(default=None, min_length=1, max_length=256,
                              description="An earlier request that must finish first.")
    segments: list[SegmentLine] = Field(min_length=1, max_length=MAX_SEGMENTS,
                                        description="The prompt, in order; requests share "
                                                    "KV up to the first differing segment.")
    output_tokens: int = Field(default=1, ge=1, le=MAX_TOKENS)
    output_key: str | None = Field(default=None, min_length=1, max_length=256,
                                   description="Names the generated tokens, so a later "
                                               "prompt can continue this request's KV.")


class HeaderLine(BaseModel):
    """The optional first line: the format version and what generated the trace."""

    model_config = ConfigDict(extra="forbid", title="Header")

    kvtool_trace: Literal[2]
    workload: str | None = Field(default=None, max_length=256)
    seed: int | None = None
    params: dict[str, Any] = Field(default_factory=dict)


class LegacyRequestLine(BaseModel):
    """A version 1 request line: one shared prefix plus the request's own suffix."""

    model_config = ConfigDict(extra="forbid", title="LegacyRequest")

    id: str = _KEY
    arrival: int = Field(default=0, ge=0, le=MAX_TOKENS)
    prefix: str = _KEY
    prefix_tokens: int = Field(ge=0, le=MAX_TOKENS)
    suffix_tokens: int = Field(default=0, ge=0, le=MAX_TOKENS)
    output_tokens: int = Field(default=1, ge=1, le=MAX_TOKENS)


def trace_schema() -> dict[str, Any]:
    """JSON Schema of one trace line (``docs/schemas/trace.schema.json``)."""
    defs: dict[str, Any] = {}
    for model in (HeaderLine, RequestLine, LegacyRequestLine):
        schema = model.model_json_schema(ref_template="#/$defs/{model}")
        defs.update(schema.pop("$defs", {}))
        defs[schema["title"]] = schema
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "kvtool simulate trace line",
        "description": (
            "One line of a JSON Lines trace for `kvtool simulate --trace`: an optional "
            "header first, then one request per line (version 2), or version 1 request "
            "lines without a header."
        ),
        "oneOf": [{"$ref": f"#/$defs/{name}"} for name in ("Header", "Request",
                                                          "LegacyRequest")],
        "$defs": defs,
    }


@dataclass(frozen=True)
class Trace:
    """A trace read from a file: its header (None for version 1) and its requests."""

    header: HeaderLine | None
    requests: list[Request]


def _from_line(line: RequestLine) -> Request:
    return Request(
        id=line.id, arrival=line.arrival, after=line.after,
        segments=tuple(Segment(s.key, s.tokens) for s in line.segments),
        output_tokens=line.output_tokens, output_key=line.output_key,
    )


def _from_legacy(line: LegacyRequestLine) -> Request:
    segments = [Segment(line.prefix, line.prefix_tokens)] if line.prefix_tokens else []
    # The request's own suffix: a key no other request has (ids are unique).
    if line.suffix_tokens or not segments:
        segments.append(Segment(f"{line.id}\x00suffix", max(line.suffix_tokens, 1)))
    return Request(id=line.id, arrival=line.arrival, segments=tuple(segments),
                   output_tokens=line.output_tokens)


def _parse(model: type[BaseModel], data: Any, where: str) -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "request"
        raise KvtoolError(f"{where}: {field}: {first['msg']}") from None


def parse_trace(text: str, name: str) -> Trace:
    """Parse a trace's text; a bad line is a KvtoolError naming ``name`` and the line."""
    header: HeaderLine | None = None
    requests: list[Request] = []
    version: int | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{name}:{number}"
        try:
            data = loads_json(line, where)
        except json.JSONDecodeError as exc:
            raise KvtoolError(f"{where}: not JSON ({exc.msg})") from None
        if not isinstance(data, dict):
            raise KvtoolError(f"{where}: expected a JSON object")
        if "kvtool_trace" in data:
            if requests or header is not None:
                raise KvtoolError(f"{where}: the header must be the first line")
            if data["kvtool_trace"] != TRACE_VERSION:
                raise KvtoolError(
                    f"{where}: trace version {data['kvtool_trace']!r} is not supported "
                    f"(this kvtool reads version {TRACE_VERSION} and headerless version 1)"
                )
            header = _parse(HeaderLine, data, where)
            version = TRACE_VERSION
            continue
        legacy = "prefix" in data or "prefix_tokens" in data
        if version is None:
            version = 1 if legacy else TRACE_VERSION
        if legacy and version != 1:
            raise KvtoolError(f"{where}: a version 1 line (prefix, prefix_tokens) in a "
                              "version 2 trace; use segments")
        if version == 1:
            requests.append(_from_legacy(_parse(LegacyRequestLine, data, where)))
        else:
            requests.append(_from_line(_parse(RequestLine, data, where)))
    if not requests:
        raise KvtoolError(f"--trace {name}: no requests")
    return Trace(header, _checked(requests, name))


def _checked(requests: list[Request], name: str) -> list[Request]:
    """Unique ids, ``after`` naming an earlier request, one length per segment key;
    returns the requests with their ``dependents`` counted, in the order a reader
    needs (see the module docstring): stably by the arrival of the request each
    one's chain of ``after`` starts from."""
    seen: dict[str, int] = {}
    dependents: dict[str, int] = {}
    lengths: dict[str, int] = {}
    for index, request in enumerate(requests):
        if request.id in seen:
            raise KvtoolError(f"--trace {name}: request id {request.id!r} appears twice")
        if request.after is not None:
            if request.after not in seen:
                raise KvtoolError(f"--trace {name}: request {request.id!r}: after "
                                  f"{request.after!r}, which is not an earlier request")
            dependents[request.after] = dependents.get(request.after, 0) + 1
        named = [*request.segments]
        if request.output_key is not None:
            named.append(Segment(request.output_key, request.output_tokens))
        for segment in named:
            known = lengths.setdefault(segment.key, segment.tokens)
            if known != segment.tokens:
                raise KvtoolError(
                    f"--trace {name}: request {request.id!r}: segment {segment.key!r} has "
                    f"{segment.tokens} tokens here and {known} elsewhere (a key names one content)"
                )
        seen[request.id] = index
    root: dict[str, int] = {}
    for request in requests:
        root[request.id] = request.arrival if request.after is None else root[request.after]
    ordered = sorted(requests, key=lambda r: root[r.id])
    return [
        _with_dependents(r, dependents[r.id]) if r.id in dependents else r for r in ordered
    ]


def _with_dependents(request: Request, count: int) -> Request:
    return Request(request.id, request.segments, request.output_tokens, request.arrival,
                   request.after, request.output_key, count)


def read_trace(path: Path) -> Trace:
    """The trace at ``path`` (a regular file within the ``input_bytes`` limit)."""
    return parse_trace(read_input_text(path), str(path))


def request_line(request: Request) -> dict[str, Any]:
    """The version 2 line of a request (the JSON object, before encoding)."""
    line: dict[str, Any] = {"id": request.id}
    if request.arrival:
        line["arrival"] = request.arrival
    if request.after is not None:
        line["after"] = request.after
    line["segments"] = [{"key": s.key, "tokens": s.tokens} for s in request.segments]
    line["output_tokens"] = request.output_tokens
    if request.output_key is not None:
        line["output_key"] = request.output_key
    return line


def write_trace(stream: IO[str], requests: Iterable[Request], header: HeaderLine | None = None,
                ) -> int:
    """Write a version 2 trace (a header line first); returns the requests written."""
    header = header or HeaderLine(kvtool_trace=TRACE_VERSION)
    stream.write(json.dumps(header.model_dump(exclude_none=True), separators=(",", ":")) + "\n")
    count = 0
    for request in requests:
        stream.write(json.dumps(request_line(request), separators=(",", ":")) + "\n")
        count += 1
    return count


def segment_token_ids(key: str, tokens: int, *, seed: int = 0,
                      vocab: tuple[int, int] = (10, 460)) -> list[int]:
    """Token ids standing for a segment's content, the same for the same key and seed.

    For an engine that replays a trace: equal keys give equal ids (so equal KV),
    different keys different ids (a collision over a whole block is
    vanishingly unlikely). ``vocab`` is the half-open id range to draw from; the
    default suits the tiny test model's 471-token vocabulary.
    """
    low, high = vocab
    rng = random.Random(f"{seed}\x00{key}")  # str seeds hash with SHA-512: stable across runs
    return [rng.randrange(low, high) for _ in range(tokens)]


def prompt_token_ids(request: Request, *, seed: int = 0, vocab: tuple[int, int] = (10, 460),
                     outputs: Mapping[str, Sequence[int]] | None = None) -> list[int]:
    """A request's prompt as token ids: each segment's :func:`segment_token_ids`, except a
    segment found in ``outputs`` (an earlier request's ``output_key`` -> the tokens it
    really generated), so the prompt continues that request's KV."""
    ids: list[int] = []
    for segment in request.segments:
        real = outputs.get(segment.key) if outputs is not None else None
        ids += (list(real) if real is not None
                else segment_token_ids(segment.key, segment.tokens, seed=seed, vocab=vocab))
    return ids


# --------------------------------------------------------------------------- generators


class WorkloadParams(BaseModel):
    """Parameters every generated workload has (and a bound on its requests' size)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    num_requests: int = Field(default=200, ge=1, le=1 << 32)

    def request_tokens_bound(self) -> int:
        """Most prompt plus output tokens one request can have."""
        raise NotImplementedError


class ChatParams(WorkloadParams):
    """Multi-turn chat: each conversation resends its whole history with a new user turn."""

    turns: int = Field(default=5, ge=1, description="Turns per conversation.")
    system_prompts: int = Field(default=2, ge=1, description="Distinct system prompts.")
    system_tokens: int = Field(default=256, ge=0, le=MAX_TOKENS)
    user_tokens: int = Field(default=48, ge=1, le=MAX_TOKENS)
    output_tokens: int = Field(default=32, ge=1, le=MAX_TOKENS)
    think_steps: int = Field(default=4, ge=0, le=MAX_TOKENS,
                             description="Steps between a reply and the next turn.")
    start_every: int = Field(default=2, ge=0, le=MAX_TOKENS,
                             description="Steps between conversation starts.")
    replies_fed_back: bool = Field(
        default=True, description="The next turn's prompt holds the generated reply "
                                  "(else a canned reply of the same length).")

    def request_tokens_bound(self) -> int:
        return self.system_tokens + self.turns * (self.user_tokens + self.output_tokens)


class RagParams(WorkloadParams):
    """Questions over documents: most requests read one of a few hot documents."""

    documents: int = Field(default=32, ge=1)
    hot_documents: int = Field(default=3, ge=1)
    hot_fraction: float = Field(default=0.7, ge=0.0, le=1.0)
    system_tokens: int = Field(default=64, ge=0, le=MAX_TOKENS)
    document_tokens: int = Field(default=512, ge=1, le=MAX_TOKENS)
    question_tokens: int = Field(default=32, ge=1, le=MAX_TOKENS)
    output_tokens: int = Field(default=16, ge=1, le=MAX_TOKENS)
    arrive_every: int = Field(default=0, ge=0, le=MAX_TOKENS,
                              description="Steps between arrivals (0: all at step 0).")

    def request_tokens_bound(self) -> int:
        return (self.system_tokens + self.document_tokens + self.question_tokens
                + self.output_tokens)


class ZipfParams(WorkloadParams):
    """Prefixes drawn by Zipf rank: prefix k is chosen with weight 1 / k**alpha."""

    prefixes: int = Field(default=64, ge=1)
    alpha: float = Field(default=1.1, ge=0.0, le=10.0)
    system_tokens: int = Field(default=0, ge=0, le=MAX_TOKENS)
    prefix_tokens: int = Field(default=256, ge=1, le=MAX_TOKENS)
    suffix_tokens: int = Field(default=32, ge=1, le=MAX_TOKENS)
    output_tokens: int = Field(default=16, ge=1, le=MAX_TOKENS)
    arrive_every: int = Field(default=0, ge=0, le=MAX_TOKENS)

    def request_tokens_bound(self) -> int:
        return self.system_tokens + self.prefix_tokens + self.suffix_tokens + self.output_tokens


class PrefixRepetitionParams(WorkloadParams):
    """``vllm bench serve --dataset-name prefix_repetition``: N prefixes, each request
    picks one at random and adds its own suffix (the default workload)."""

    num_prefixes: int = Field(default=16, ge=1)
    prefix_tokens: int = Field(default=512, ge=0, le=MAX_TOKENS)
    suffix_tokens: int = Field(default=64, ge=0, le=MAX_TOKENS)
    output_tokens: int = Field(default=16, ge=1, le=MAX_TOKENS)

    def request_tokens_bound(self) -> int:
        return max(self.prefix_tokens + self.suffix_tokens, 1) + self.output_tokens


def _prompt(*segments: Segment) -> tuple[Segment, ...]:
    return tuple([s for s in segments if s.tokens > 0])  # a list first: twice as fast


def chat(params: ChatParams, seed: int = 0) -> Iterator[Request]:
    """Conversations of ``turns`` turns; turn t resends turns 0..t-1 and a new question.

    The seed picks each conversation's system prompt and varies its turn count
    (1 to ``turns``), so conversations end at different times.
    """
    rng = random.Random(seed)
    p = params
    made = 0
    for c in itertools.count():
        if made >= p.num_requests:
            return
        history: list[Segment] = []
        system = Segment(f"sys{rng.randrange(p.system_prompts)}", p.system_tokens)
        turns = min(rng.randint(1, p.turns), p.num_requests - made)
        for t in range(turns):
            # A canned reply is content of its own, not what the request generated.
            reply = f"c{c}/a{t}" if p.replies_fed_back else f"c{c}/r{t}"
            history.append(Segment(f"c{c}/u{t}", p.user_tokens))
            yield Request(
                id=f"c{c}t{t}", segments=_prompt(system, *history),
                output_tokens=p.output_tokens,
                arrival=c * p.start_every if t == 0 else p.think_steps,
                after=None if t == 0 else f"c{c}t{t - 1}",
                output_key=reply if p.replies_fed_back else None,
                dependents=1 if t + 1 < turns else 0,
            )
            history.append(Segment(reply, p.output_tokens))
        made += turns


def rag(params: RagParams, seed: int = 0) -> Iterator[Request]:
    """Each request: system prompt, one document (hot with ``hot_fraction``), a question."""
    rng = random.Random(seed)
    p = params
    hot = min(p.hot_documents, p.documents)
    system = Segment("sys", p.system_tokens)
    for i in range(p.num_requests):
        if rng.random() < p.hot_fraction or hot == p.documents:
            doc = rng.randrange(hot)
        else:
            doc = rng.randrange(hot, p.documents)
        yield Request(
            id=f"q{i}", arrival=i * p.arrive_every, output_tokens=p.output_tokens,
            segments=_prompt(system, Segment(f"doc{doc}", p.document_tokens),
                             Segment(f"q{i}", p.question_tokens)),
        )


def zipf(params: ZipfParams, seed: int = 0) -> Iterator[Request]:
    """Each request: an optional system prompt, a Zipf-drawn prefix and its own suffix."""
    rng = random.Random(seed)
    p = params
    weights = list(itertools.accumulate(1.0 / (k ** p.alpha) for k in range(1, p.prefixes + 1)))
    system = Segment("sys", p.system_tokens)
    for i in range(p.num_requests):
        rank = rng.choices(range(p.prefixes), cum_weights=weights)[0]
        yield Request(
            id=f"z{i}", arrival=i * p.arrive_every, output_tokens=p.output_tokens,
            segments=_prompt(system, Segment(f"p{rank}", p.prefix_tokens),
                             Segment(f"z{i}/s", p.suffix_tokens)),
        )


def prefix_repetition(params: PrefixRepetitionParams, seed: int = 0) -> Iterator[Request]:
    """Requests cycling through ``num_prefixes`` shared prefixes, all arriving at step 0."""
    rng = random.Random(seed)
    p = params
    for i in range(p.num_requests):
        prefix = Segment(f"p{rng.randrange(p.num_prefixes)}", p.prefix_tokens)
        segments = _prompt(prefix, Segment(f"r{i}/s", p.suffix_tokens))
        yield Request(id=f"r{i}", output_tokens=p.output_tokens,
                      segments=segments or (Segment(f"r{i}/s", 1),))


@dataclass(frozen=True)
class Workload:
    """A generator and its parameters: ``kvtool simulate --workload NAME --param k=v``."""

    name: str
    params: type[WorkloadParams]
    generate: Callable[[Any, int], Iterator[Request]]

    def describe(self) -> str:
        return (self.params.__doc__ or "").strip().splitlines()[0]


WORKLOADS: dict[str, Workload] = {
    w.name: w for w in (
        Workload("prefix-repetition", PrefixRepetitionParams, prefix_repetition),
        Workload("chat", ChatParams, chat),
        Workload("rag", RagParams, rag),
        Workload("zipf", ZipfParams, zipf),
    )
}
"""The one registry of generated workloads (CLI choices, help and docs read it)."""


def workload_params(name: str, given: dict[str, Any]) -> WorkloadParams:
    """Validated parameters of workload ``name`` (a KvtoolError names a bad one)."""
    workload = WORKLOADS[name]
    known = workload.params.model_fields
    for key in given:
        if key not in known:
            raise KvtoolError(f"--param {key}: not a parameter of the {name} workload "
                              f"(it has {', '.join(known)})")
    params: WorkloadParams = _parse(workload.params, given, f"--workload {name}")
    return params


def generate(name: str, params: WorkloadParams, seed: int = 0) -> Iterator[Request]:
    """The requests of a generated workload, lazily, in reading order."""
    return WORKLOADS[name].generate(params, seed)


def header_for(name: str, params: WorkloadParams, seed: int) -> HeaderLine:
    """The header a generated trace is written with: enough to generate it again."""
    return HeaderLine(kvtool_trace=TRACE_VERSION, workload=name, seed=seed,
                      params=params.model_dump())
