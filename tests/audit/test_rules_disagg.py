"""CN050: engines of one prefill/decode pair (defined in the same file) must agree.

Shapes follow vLLM's disaggregated-prefill examples (examples/online_serving/
disaggregated_serving in vllm-project/vllm): NixlConnector on both engines, the prefill
side kv_producer and the decode side kv_consumer.
"""

from __future__ import annotations

import json

from kvtool.audit.engine import Auditor
from kvtool.audit.model import Invocation, Location, SourceToken
from kvtool.audit.normalize import normalize
from kvtool.audit.settings import AuditSettings
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
