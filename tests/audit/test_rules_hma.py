"""HMA as vLLM decides it, against what the model needs (CN011, CN040, CN041).

Models are named as operators write them and classified by rules/models/families.toml
(the rule kit wires the shipped lookup), so these tests also cover the family table.
"""

from __future__ import annotations

from tests.audit.rulekit import codes, config, ktc, only, opt, run

QWEN35 = "Qwen/Qwen3.5-27B"
GEMMA3 = "google/gemma-3-12b-it"
FORCE_ON = opt(
    "--disable-hybrid-kv-cache-manager", False, written="--no-disable-hybrid-kv-cache-manager"
)


def test_state_hybrid_with_lmcache_v1_does_not_start() -> None:
    # vllm v0.32.0 vllm/v1/core/kv_cache_utils.py: unify_hybrid_kv_cache_specs raises
    # "Hybrid KV cache manager is disabled but failed to convert the KV cache specs to one
    # unified type"; LMCacheConnectorV1 never subclasses SupportsHMA (release tables).
    cfg = config("0.32.0", ktc(kv_connector="LMCacheConnectorV1", kv_role="kv_both"), model=QWEN35)
    finding = only(run(cfg), "CN011")
    assert finding.severity.value == "error"
    assert "failed to convert the KV cache specs" in finding.message


def test_state_hybrid_with_an_hma_connector_is_quiet() -> None:
    # OffloadingConnector subclasses SupportsHMA from 0.21.0 and 0.22.0+ keeps HMA on for it.
    assert "CN011" not in codes(
        run(config("0.32.0", opt("--kv-offloading-size", "100"), model=QWEN35))
    )
    # LMCacheMPConnector decides SupportsHMA at import time (lmcache >= 0.4.7 has it): no error.
    cfg = ktc(kv_connector="LMCacheMPConnector", kv_role="kv_both")
    assert "CN011" not in codes(run(config("0.32.0", cfg, model=QWEN35)))


def test_any_kv_transfer_config_on_0_13_to_0_21_turns_hma_off_for_a_state_hybrid() -> None:
    # vg "How HMA was decided": with the flag unset, any --kv-transfer-config turns HMA off
    # on 0.13-0.21 (vllm v0.17.0 vllm/config/vllm.py); threads show Qwen3.x-Next/3.6 failing
    # to start with OffloadingConnector there (https://github.com/vllm-project/vllm/pull/36636).
    cfg = ktc(kv_connector="OffloadingConnector", kv_role="kv_both")
    assert only(run(config("0.21.0", cfg, model=QWEN35)), "CN011").severity.value == "error"
    # Nearest neighbour: --no-disable-hybrid-kv-cache-manager keeps HMA on (tri-state flag),
    # and OffloadingConnector has SupportsHMA on 0.21.0.
    assert "CN011" not in codes(run(config("0.21.0", cfg, FORCE_ON, model=QWEN35)))


def test_sliding_window_model_with_hma_off_is_a_warning() -> None:
    # Sliding-window specs are converted to full attention when HMA is off: the engine runs
    # with less room (vllm v0.32.0 vllm/v1/core/kv_cache_utils.py unify_hybrid_kv_cache_specs).
    disable = opt("--disable-hybrid-kv-cache-manager")
    finding = only(run(config("0.32.0", disable, model=GEMMA3)), "CN011")
    assert finding.severity.value == "warning"
    assert "CN011" not in codes(run(config("0.32.0", model=GEMMA3)))


def test_dense_model_with_hma_off_is_quiet() -> None:
    cfg = config("0.32.0", ktc(kv_connector="LMCacheConnectorV1", kv_role="kv_both"))
    assert "CN011" not in codes(run(cfg))


def test_unknown_model_gets_one_info_naming_the_skipped_checks() -> None:
    cfg = config("0.32.0", opt("--kv-offloading-size", "100"), model="my-org/private-model")
    finding = only(run(cfg), "CN040")
    assert finding.severity.value == "info" and "CN011" in finding.message
    # Known model, or no connector at all: nothing to say.
    assert "CN040" not in codes(run(config("0.32.0", opt("--kv-offloading-size", "100"))))
    assert "CN040" not in codes(run(config("0.32.0", model="my-org/private-model")))


def test_chunked_local_attention_model_notes_vllm_turns_hma_off() -> None:
    # vllm v0.12.0 vllm/config/vllm.py: attention_chunk_size set and
    # VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE unset -> HMA off with a warning.
    scout = "meta-llama/Llama-4-Scout-17B-16E-Instruct"
    size = opt("--kv-offloading-size", "100")
    assert only(run(config("0.32.0", size, model=scout)), "CN041").severity.value == "info"
    env = {"VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE": "1"}
    assert "CN041" not in codes(run(config("0.32.0", size, model=scout, env=env)))


def test_the_threads_qwen36_with_lmcache_v1_on_0_19_1_fail_to_start() -> None:
    # LMCache/LMCache#3163 (and vllm-project/vllm#42911): vllm 0.19.1, TP 4,
    # LMCacheConnectorV1, Qwen3.6-27B -> "Hybrid KV cache manager is disabled but failed
    # to convert the KV cache specs to one unified type".
    cfg = config(
        "0.19.1",
        opt("--tensor-parallel-size", "4"),
        opt("--enable-prefix-caching"),
        ktc(kv_connector="LMCacheConnectorV1", kv_role="kv_both"),
        model="Qwen/Qwen3.6-27B",
    )
    finding = only(run(cfg), "CN011")
    assert finding.severity.value == "error" and finding.evidence["reason"] == "transfer-config"
    # vllm-project/vllm#42024: NIXL on 0.13-0.21 silently turns HMA off for a windowed
    # model (any --kv-transfer-config): the engine runs with less room, a warning.
    nixl = config("0.21.0", ktc(kv_connector="NixlConnector", kv_role="kv_both"), model=GEMMA3)
    assert only(run(nixl), "CN011").severity.value == "warning"
