"""CN050, CN065: engines of one prefill/decode pair (defined in the same file) must agree,
and NIXL engines must not share an engine_id.

Shapes follow vLLM's disaggregated-prefill examples (examples/online_serving/
disaggregated_serving in vllm-project/vllm): NixlConnector on both engines, the prefill
side kv_producer and the decode side kv_consumer.
"""

from __future__ import annotations

import json

from packaging.version import Version

from kvtool.audit.engine import Auditor
from kvtool.audit.model import Invocation, Location, SourceToken
from kvtool.audit.normalize import normalize
from kvtool.audit.rules._premises import premise_records
from kvtool.audit.settings import AuditSettings
from kvtool.releases import release_index
from tests.audit.test_engine import FixedTables

FILE = "pd.yaml"


def engine(line: int, label: str, *words: str) -> Invocation:
    tokens = tuple(
        SourceToken(text=w, location=Location(file=FILE, line=line, column=1 + i))
        for i, w in enumerate(("meta-llama/Llama-3.1-8B-Instruct", *words))
    )
    return Invocation(kind="kubernetes", label=label, file=FILE, tokens=tokens)


def ktc(connector: str, role: str) -> tuple[str, str]:
    return "--kv-transfer-config", json.dumps({"kv_connector": connector, "kv_role": role})


def cn050(*invocations: Invocation) -> dict[str, list[str]]:
    report = Auditor(FixedTables("0.32.0"), normalize, AuditSettings(vllm_version="0.32.0")).run(
        list(invocations)
    )
    return {
        inv.label: [f.severity.value for f in inv.findings if f.code == "CN050"]
        for inv in report.invocations
    }


def test_a_decode_engine_without_a_connector_is_an_error() -> None:
    prefill = engine(2, "prefill", *ktc("NixlConnector", "kv_producer"))
    decode = engine(20, "decode")
    assert cn050(prefill, decode) == {"prefill": [], "decode": ["error"]}


def test_a_pair_with_the_same_connector_is_quiet() -> None:
    prefill = engine(2, "prefill", *ktc("NixlConnector", "kv_producer"))
    decode = engine(20, "decode", *ktc("NixlConnector", "kv_consumer"))
    assert cn050(prefill, decode) == {"prefill": [], "decode": []}


def test_a_pair_with_different_connectors_is_an_error_on_both_sides() -> None:
    prefill = engine(2, "prefill", *ktc("NixlConnector", "kv_producer"))
    decode = engine(20, "decode", *ktc("MooncakeConnector", "kv_consumer"))
    assert cn050(prefill, decode) == {"prefill": ["error"], "decode": ["error"]}


def test_engines_in_other_files_are_not_partners() -> None:
    prefill = engine(2, "prefill", *ktc("NixlConnector", "kv_producer"))
    other = Invocation(
        kind="shell", label="other.sh:1", file="other.sh", tokens=(SourceToken(text="m"),)
    )
    assert cn050(prefill, other) == {"prefill": [], "other.sh:1": []}


def _nixl(role: str, **extra: str) -> tuple[str, str]:
    return "--kv-transfer-config", json.dumps(
        {"kv_connector": "NixlConnector", "kv_role": role, **extra}
    )


def cn065(version: str, *invocations: Invocation) -> dict[str, list[str]]:
    report = Auditor(FixedTables(version), normalize, AuditSettings(vllm_version=version)).run(
        list(invocations)
    )
    return {
        inv.label: [f.severity.value for f in inv.findings if f.code == "CN065"]
        for inv in report.invocations
    }


def test_two_nixl_engines_with_one_engine_id_are_an_error_on_both() -> None:
    a = engine(2, "prefill-a", *_nixl("kv_producer", engine_id="prefill"))
    b = engine(20, "prefill-b", *_nixl("kv_producer", engine_id="prefill"))
    decode = engine(40, "decode", *_nixl("kv_consumer"))
    assert cn065("0.32.0", a, b, decode) == {
        "prefill-a": ["error"],
        "prefill-b": ["error"],
        "decode": [],
    }


def test_distinct_or_generated_engine_ids_are_quiet() -> None:
    a = engine(2, "prefill-a", *_nixl("kv_producer", engine_id="prefill-a"))
    b = engine(20, "prefill-b", *_nixl("kv_producer", engine_id="prefill-b"))
    assert cn065("0.32.0", a, b) == {"prefill-a": [], "prefill-b": []}
    # No engine_id at all: vLLM gives each engine a uuid4.
    c = engine(2, "prefill-c", *_nixl("kv_producer"))
    d = engine(20, "prefill-d", *_nixl("kv_producer"))
    assert cn065("0.32.0", c, d) == {"prefill-c": [], "prefill-d": []}


def test_engine_id_rule_follows_its_premise_range() -> None:
    # The premise's range is proven from the wheels (rules/audit/premises.json): before
    # its first release NixlConnector did not exist and the rule is quiet.
    record = premise_records()["nixl.remote_agents_keyed_by_engine_id"]
    assert record.proven and record.since is not None
    older = [v for v in release_index().versions if Version(v) < Version(record.since)]
    a = engine(2, "prefill-a", *_nixl("kv_producer", engine_id="prefill"))
    b = engine(20, "prefill-b", *_nixl("kv_producer", engine_id="prefill"))
    assert cn065(older[-1], a, b) == {"prefill-a": [], "prefill-b": []}
    assert cn065(record.since, a, b) == {"prefill-a": ["error"], "prefill-b": ["error"]}
