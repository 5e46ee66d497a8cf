"""CN066: NixlConnector's start-up refusals for context parallelism, read per release
from the wheels (rules/audit/constraints.json ``nixl_refusals``, scripts/gen_constraints.py).

The releases and messages are derived from the table, so a refusal that moves or goes
moves the test with it. The config shape is vLLM's own P/D flags
(https://github.com/vllm-project/vllm/blob/v0.32.0/vllm/distributed/kv_transfer/kv_connector/v1/nixl/connector.py
reads prefill_context_parallel_size, decode_context_parallel_size and kv_role).
"""

from __future__ import annotations

from kvtool.audit.rules._constraints import constraints_at
from kvtool.audit.rules.connectors.parallel_refusals import evaluate
from kvtool.releases import release_index
from tests.audit.rulekit import codes, config, ktc, only, opt, run

RELEASES = release_index().versions
PCP2 = opt("--prefill-context-parallel-size", "2")


def _refusing(message_start: str) -> list[str]:
    """Releases whose NIXL code holds a refusal whose message starts so."""
    found = []
    for version in RELEASES:
        facts = constraints_at(version)
        if facts and any(r.message.startswith(message_start) for r in facts.nixl_refusals):
            found.append(version)
    return found


def test_pcp_on_a_consumer_or_kv_both_is_refused_where_the_wheel_says() -> None:
    refusing = _refusing("NixlConnector PCP currently supports kv_producer only")
    assert refusing and RELEASES[-1] in refusing
    for version in RELEASES:
        both = config(version, PCP2, ktc(kv_connector="NixlConnector", kv_role="kv_both"))
        assert ("CN066" in codes(run(both))) is (version in refusing), version
    newest = RELEASES[-1]
    consumer = config(newest, PCP2, ktc(kv_connector="NixlConnector", kv_role="kv_consumer"))
    assert "kv_producer only" in only(run(consumer), "CN066").message
    # Nearest neighbours: the prefill side with PCP, and the consumer without it.
    producer = config(newest, PCP2, ktc(kv_connector="NixlConnector", kv_role="kv_producer"))
    assert "CN066" not in codes(run(producer))
    plain = config(newest, ktc(kv_connector="NixlConnector", kv_role="kv_consumer"))
    assert "CN066" not in codes(run(plain))


def test_push_only_refusals_stay_with_the_push_mode() -> None:
    refusing = _refusing("NixlPushConnector does not support decode_context_parallel_size")
    assert refusing
    newest = RELEASES[-1]
    dcp2 = opt("--decode-context-parallel-size", "2")
    push = ktc(
        kv_connector="NixlConnector",
        kv_role="kv_consumer",
        kv_connector_extra_config={"transfer_mode": "push"},
    )
    assert "NixlPushConnector" in only(run(config(newest, dcp2, push)), "CN066").message
    pull = ktc(kv_connector="NixlConnector", kv_role="kv_consumer")
    assert "CN066" not in codes(run(config(newest, dcp2, pull)))


def test_conditions_that_name_the_model_or_the_peer_are_left_unreported() -> None:
    values = {"pcp_size": 2, "dcp_size": 2, "tensor_parallel_size": 2, "kv_role": "kv_both"}
    assert evaluate('pcp_size > 1 and kv_role in ("kv_consumer", "kv_both")', values) is True
    assert evaluate("pcp_size > 1 and dcp_size > 1 and (tensor_parallel_size != 1)", values)
    assert evaluate("self._has_mamba and self.dcp_size > 1", values) is None
    # A known False term settles an `and` whatever the unknown one says.
    assert evaluate("pcp_size > 4 and remote_dcp_size > 1", values) is False
    assert evaluate("remote_pcp_size > 1 or dcp_size > 1", values) is True
