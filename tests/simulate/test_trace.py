"""The trace format with multi-level prefixes: reading, writing, its schema, the generators."""

from __future__ import annotations

import io
import json
from collections import Counter
from pathlib import Path

import jsonschema
import pytest

from kvtool.errors import KvtoolError
from kvtool.simulate import trace
from tests.conftest import REPO_ROOT

SCHEMA = REPO_ROOT / "docs" / "schemas" / "trace.schema.json"


def _written(name: str, params: dict[str, object], seed: int = 0) -> str:
    model = trace.workload_params(name, params)
    buffer = io.StringIO()
    header = trace.header_for(name, model, seed)
    trace.write_trace(buffer, trace.generate(name, model, seed), header)
    return buffer.getvalue()


def test_committed_schema_is_generated_from_the_code() -> None:
    committed = json.loads(SCHEMA.read_text(encoding="utf-8"))
    assert committed == trace.trace_schema(), "run python scripts/gen_schemas.py"
    jsonschema.Draft202012Validator.check_schema(committed)


@pytest.mark.parametrize("name", sorted(trace.WORKLOADS))
def test_every_written_line_validates_and_reads_back(name: str) -> None:
    text = _written(name, {"num_requests": 40}, seed=3)
    validator = jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text(encoding="utf-8")))
    for line in text.splitlines():
        validator.validate(json.loads(line))
    read = trace.parse_trace(text, "t.jsonl")
    assert read.header is not None and read.header.workload == name
    again = trace.generate(name, trace.workload_params(name, read.header.params), 3)
    assert read.requests == list(again)  # the header is enough to generate it again


def test_generators_are_seeded() -> None:
    assert _written("zipf", {"num_requests": 50}, 1) == _written("zipf", {"num_requests": 50}, 1)
    assert _written("zipf", {"num_requests": 50}, 1) != _written("zipf", {"num_requests": 50}, 2)


def test_zipf_draws_low_ranks_most_often() -> None:
    params = trace.ZipfParams(num_requests=4000, prefixes=20, alpha=1.0)
    counts = Counter(r.segments[0].key for r in trace.zipf(params, seed=0))
    # Weight 1/k over 20 ranks: rank 1 has 1/H(20) = 27.8% of the draws, rank 2 half that.
    harmonic = sum(1 / k for k in range(1, 21))
    assert counts["p0"] / 4000 == pytest.approx(1 / harmonic, abs=0.03)
    assert counts["p1"] / counts["p0"] == pytest.approx(0.5, abs=0.1)


def test_rag_reads_hot_documents_at_the_given_fraction() -> None:
    params = trace.RagParams(num_requests=3000, documents=30, hot_documents=3, hot_fraction=0.8)
    docs = Counter(r.segments[1].key for r in trace.rag(params, seed=5))
    hot = sum(docs[f"doc{d}"] for d in range(3))
    assert hot / 3000 == pytest.approx(0.8, abs=0.03)
    assert all(r.segments[0].key == "sys" for r in trace.rag(params, seed=5))


def test_chat_turns_extend_the_previous_prompt_with_its_reply() -> None:
    requests = list(trace.chat(trace.ChatParams(num_requests=30, turns=4), seed=2))
    by_id = {r.id: r for r in requests}
    followers = [r for r in requests if r.after is not None]
    assert followers
    for turn in followers:
        before = by_id[turn.after or ""]
        reply = trace.Segment(before.output_key or "", before.output_tokens)
        assert turn.segments[:len(before.segments) + 1] == (*before.segments, reply)
        assert before.dependents == 1
    canned = list(trace.chat(trace.ChatParams(num_requests=30, turns=4,
                                              replies_fed_back=False), seed=2))
    assert all(r.output_key is None for r in canned)


def test_prompt_token_ids_share_exactly_the_shared_segments() -> None:
    a, b = trace.rag(trace.RagParams(num_requests=2, hot_fraction=1.0, hot_documents=1), seed=0)
    ids_a, ids_b = trace.prompt_token_ids(a), trace.prompt_token_ids(b)
    shared = a.segments[0].tokens + a.segments[1].tokens
    assert ids_a[:shared] == ids_b[:shared] and ids_a[shared:] != ids_b[shared:]
    assert len(ids_a) == a.prompt_tokens
    turn0, turn1 = list(trace.chat(trace.ChatParams(num_requests=2, turns=2), seed=1))[:2]
    if turn1.after == turn0.id:
        real = [7] * turn0.output_tokens
        ids = trace.prompt_token_ids(turn1, outputs={turn0.output_key or "": real})
        start = turn0.prompt_tokens
        assert ids[start:start + len(real)] == real


def test_version_1_lines_are_still_read(tmp_path: Path) -> None:
    path = tmp_path / "old.jsonl"
    path.write_text('{"id": "a", "arrival": 2, "prefix": "doc", "prefix_tokens": 128, '
                    '"suffix_tokens": 16, "output_tokens": 4}\n'
                    '{"id": "b", "prefix": "doc", "prefix_tokens": 128}\n')
    b, a = trace.read_trace(path).requests  # in arrival order
    assert a.segments[0] == b.segments[0] == trace.Segment("doc", 128)
    assert a.prompt_tokens == 144 and a.arrival == 2 and b.prompt_tokens == 128


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (['{"kvtool_trace": 3}'], "version 3 is not supported"),
        (['{"id": "a", "segments": [{"key": "s", "tokens": 4}]}', '{"kvtool_trace": 2}'],
         "header must be the first line"),
        (['{"id": "a", "after": "b", "segments": [{"key": "s", "tokens": 4}]}'],
         "not an earlier request"),
        (['{"id": "a", "segments": [{"key": "s", "tokens": 4}]}',
          '{"id": "b", "segments": [{"key": "s", "tokens": 8}]}'], "8 tokens here and 4"),
        (['{"id": "a", "segments": [{"key": "s", "tokens": 4}]}'] * 2, "appears twice"),
        (['{"id": "a", "segments": []}'], ":1: segments"),
        (['{"id": "a", "segments": [{"key": "s", "tokens": 1e400}]}'], ":1: segments.0.tokens"),
        (['{"id": "a", "segments": [{"key": "s", "tokens": 99999999999}]}'], "segments.0.tokens"),
        (['[1, 2]'], "expected a JSON object"),
        (['{"kvtool_trace": 2}', '{"id": "a", "prefix": "p", "prefix_tokens": 4}'],
         "version 1 line"),
        ([], "no requests"),
    ],
)
def test_bad_traces_name_the_line(lines: list[str], message: str) -> None:
    with pytest.raises(KvtoolError, match=message):
        trace.parse_trace("\n".join(lines) + "\n", "t.jsonl")


def test_unknown_workload_parameter_is_named() -> None:
    with pytest.raises(KvtoolError, match="--param hot: not a parameter of the rag"):
        trace.workload_params("rag", {"hot": 3})
