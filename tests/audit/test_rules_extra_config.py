"""kv_connector_extra_config keys against the connector that reads them (LZ009-LZ012)."""

from __future__ import annotations

import dataclasses

import msgspec
import pytest

from kvtool.audit.engine import Selection, check_config
from kvtool.connector.config import ConnectorConfig, ConnectorConfigError
from kvtool.connector.series import adapter_supports
from kvtool.releases import available_versions, load_release
from tests.audit.rulekit import codes, config, context, ktc, only, run

KVTOOL = {"kv_connector": "KvtoolConnector", "kv_connector_module_path": "kvtool.connector.vllm"}


def test_a_kvtool_key_the_connector_refuses_is_an_error_with_its_own_message() -> None:
    extra = {"kvtool.cpu_bytes": "8GiB"}
    # The engine refuses it: the connector's own schema raises at construction.
    with pytest.raises(ConnectorConfigError) as refused:
        ConnectorConfig.from_extra_config(extra)
    cfg = config("0.32.0", ktc(**KVTOOL, kv_role="kv_both", kv_connector_extra_config=extra))
    finding = only(run(cfg), "LZ009")
    assert finding.severity.value == "error"
    assert str(refused.value) in finding.message and "kvtool.host_capacity_bytes" in finding.message
    assert finding.flag == "kvtool.cpu_bytes"


def test_valid_kvtool_keys_and_out_of_range_values() -> None:
    good = {"kvtool.host_capacity_bytes": "8GiB", "kvtool.policy": "fifo"}
    cfg = config("0.32.0", ktc(**KVTOOL, kv_role="kv_both", kv_connector_extra_config=good))
    assert "LZ009" not in codes(run(cfg))
    bad = {"kvtool.fifo.threshold": 0}
    cfg = config("0.32.0", ktc(**KVTOOL, kv_role="kv_both", kv_connector_extra_config=bad))
    assert "must be >= 1" in only(run(cfg), "LZ009").message


def test_kvtool_child_of_multiconnector_is_checked_with_its_own_extra_config() -> None:
    child = {**KVTOOL, "kv_connector_extra_config": {"kvtool.polcy": "fifo"}}
    extra = {"connectors": [{"kv_connector": "NixlConnector", "kv_role": "kv_both"}, child]}
    cfg = config(
        "0.32.0",
        ktc(kv_connector="MultiConnector", kv_role="kv_both", kv_connector_extra_config=extra),
    )
    assert "kvtool.policy" in only(run(cfg), "LZ009").message


def test_kvtool_connector_on_a_release_the_adapter_refuses_is_an_error() -> None:
    supported = [v for v in available_versions() if adapter_supports(v)]
    refused = [v for v in available_versions() if not adapter_supports(v)]
    past = refused[-1]  # the newest table the adapter refuses
    child = {**KVTOOL, "kv_role": "kv_both"}
    extra = {"connectors": [{"kv_connector": "NixlConnector", "kv_role": "kv_both"}, child]}
    for kv in (
        ktc(**child),
        ktc(kv_connector="MultiConnector", kv_role="kv_both", kv_connector_extra_config=extra),
    ):
        finding = only(run(config(past, kv)), "LZ012")
        assert finding.severity.value == "error"
        assert f"vLLM {past}" in finding.message and supported[-1] in finding.message


def test_kvtool_connector_on_a_supported_release_or_another_connector_is_quiet() -> None:
    newest_supported = [v for v in available_versions() if adapter_supports(v)][-1]
    assert "LZ012" not in codes(run(config(newest_supported, ktc(**KVTOOL, kv_role="kv_both"))))
    native = ktc(
        kv_connector="OffloadingConnector",
        kv_role="kv_both",
        kv_connector_extra_config={"cpu_bytes_to_use": 10_000_000_000},
    )
    assert "LZ012" not in codes(run(config(available_versions()[-1], native)))


def test_lazy_offload_inside_offloading_connector_is_ignored() -> None:
    # vllm v0.32.0 vllm/v1/kv_offload/factory.py and the CPU spec read spec_name,
    # spec_module_path, cpu_bytes_to_use, block_size, eviction_policy...; no lazy_offload.
    extra = {"cpu_bytes_to_use": 10_000_000_000, "lazy_offload": True}
    cfg = config(
        "0.32.0",
        ktc(kv_connector="OffloadingConnector", kv_role="kv_both", kv_connector_extra_config=extra),
    )
    finding = only(run(cfg), "LZ010")
    assert finding.severity.value == "warning" and finding.flag == "lazy_offload"
    extra.pop("lazy_offload")
    assert "LZ010" not in codes(
        run(
            config(
                "0.32.0",
                ktc(
                    kv_connector="OffloadingConnector",
                    kv_role="kv_both",
                    kv_connector_extra_config=extra,
                ),
            )
        )
    )


# KServe's own sample (kserve/kserve docs/samples/llmisvc/agentic-tool-calling/
# nemotron-3-ultra-pd.yaml) gives lazy_offload to an OffloadingConnector MultiConnector child.
def _nemotron_pd_shape(offload_extra: dict[str, object]) -> dict[str, object]:
    return {
        "kv_connector": "MultiConnector",
        "kv_role": "kv_both",
        "kv_connector_extra_config": {
            "connectors": [
                {
                    "kv_connector": "NixlConnector",
                    "kv_role": "kv_consumer",
                    "kv_connector_extra_config": {"bidirectional_kv_xfer": True},
                },
                {
                    "kv_connector": "OffloadingConnector",
                    "kv_role": "kv_both",
                    "kv_connector_extra_config": offload_extra,
                },
            ]
        },
    }


def test_lazy_offload_in_an_offloading_child_is_judged_by_the_releases_own_keys() -> None:
    # Every tabled release's offload_extra_config_keys (read from vllm/v1/kv_offload/** in
    # its wheel) decides; the releases that list no lazy_offload get the warning.
    extra = {"cpu_bytes_to_use": 214748364800, "lazy_offload": True}
    for version in available_versions():
        read = load_release(version).offload_extra_config_keys
        if not read:
            continue
        found = [
            f for f in run(config(version, ktc(**_nemotron_pd_shape(extra)))) if f.code == "LZ010"
        ]
        if "lazy_offload" in read:
            assert found == [], version
        else:
            assert len(found) == 1 and f"vLLM {version} does not read" in found[0].message
            assert "stays eager" in found[0].message


def test_lazy_offload_is_quiet_where_a_release_reads_it() -> None:
    # A release whose OffloadingConnector reads lazy_offload (as a future table may say) is quiet.
    cfg = config("0.32.0", ktc(**_nemotron_pd_shape({"cpu_bytes_to_use": 1, "lazy_offload": True})))
    ctx = context(cfg)
    reads = msgspec.structs.replace(
        ctx.facts,
        offload_extra_config_keys=(*ctx.facts.offload_extra_config_keys, "lazy_offload"),
    )
    findings = check_config(dataclasses.replace(ctx, facts=reads), Selection(enabled={"LZ010"}))
    assert findings == []


def test_lazy_offload_is_simple_cpu_offload_connectors_own_key() -> None:
    # vllm v0.32.0 simple_cpu_offload_connector.py reads extra_config.get("lazy_offload").
    simple = ktc(
        kv_connector="SimpleCPUOffloadConnector",
        kv_role="kv_both",
        kv_connector_extra_config={"cpu_bytes_to_use": 8 << 30, "lazy_offload": True},
    )
    assert "LZ010" not in codes(run(config("0.32.0", simple)))
    # Its nearest wrong neighbour: a lazy_offload_* variant it does not read.
    typo = ktc(
        kv_connector="SimpleCPUOffloadConnector",
        kv_role="kv_both",
        kv_connector_extra_config={"cpu_bytes_to_use": 8 << 30, "lazy_offload_threshold": 4},
    )
    assert "LZ010" in codes(run(config("0.32.0", typo)))


def test_kvtool_keys_given_to_another_connector_do_nothing() -> None:
    extra = {"kvtool.policy": "fifo"}
    cfg = config(
        "0.32.0",
        ktc(kv_connector="OffloadingConnector", kv_role="kv_both", kv_connector_extra_config=extra),
    )
    assert "KvtoolConnector" in only(run(cfg), "LZ010").message
    # Nearest neighbour: the same key on KvtoolConnector is read.
    cfg = config("0.32.0", ktc(**KVTOOL, kv_role="kv_both", kv_connector_extra_config=extra))
    assert "LZ010" not in codes(run(cfg))


def test_offloading_connector_keys_come_from_the_release_table() -> None:
    # Read from the wheels: vllm v0.32.0 vllm/v1/kv_offload/cpu/spec.py reads
    # extra_config.get("cpu_bytes_to_use"); v0.12.0 sized the tier with num_cpu_blocks.
    typo = {"cpu_byte_to_use": 10_000_000_000}
    cfg = ktc(kv_connector="OffloadingConnector", kv_role="kv_both", kv_connector_extra_config=typo)
    finding = only(run(config("0.32.0", cfg)), "LZ011")
    assert "cpu_bytes_to_use" in finding.message
    good = {"cpu_bytes_to_use": 10_000_000_000, "eviction_policy": "lru"}
    cfg = ktc(kv_connector="OffloadingConnector", kv_role="kv_both", kv_connector_extra_config=good)
    assert "LZ011" not in codes(run(config("0.32.0", cfg)))
    # A key only later releases read does nothing on an older one.
    assert "LZ011" in codes(run(config("0.12.0", cfg)))
    # A custom spec reads its own keys: not checked.
    custom = {**typo, "spec_module_path": "my.spec"}
    cfg = ktc(
        kv_connector="OffloadingConnector", kv_role="kv_both", kv_connector_extra_config=custom
    )
    assert "LZ011" not in codes(run(config("0.32.0", cfg)))
