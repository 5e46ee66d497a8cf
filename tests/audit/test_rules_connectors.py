"""Golden tests for the CN rules (connectors, HMA, offload semantics).

SupportsHMA per connector comes from the release tables; HMA decision modes and the
backend -> connector map from rules/curated/. Expected outcomes cite
shared/reference/version-gates.md (vg) or the field guide (shared/seeds/004).
"""

from __future__ import annotations

import json
from pathlib import Path

from kvtool.audit.context import ModelFacts
from kvtool.audit.model import Severity
from tests.audit.rulekit import codes, config, context, ktc, only, opt, run

DISABLE = opt("--disable-hybrid-kv-cache-manager")
JAMBA = ModelFacts(name="ai21labs/Jamba-v0.1", hybrid=True, mamba=True)
GEMMA3 = ModelFacts(name="google/gemma-3-12b-it", hybrid=True, mamba=False)


def test_cn010_redundant_flag_with_native_offload_from_0_22_0() -> None:
    # vg §2 row 9: per-connector HMA decision from 0.22.0 (the field guide says 0.23.0).
    findings = run(config("0.22.0", opt("--kv-offloading-size", "400"), DISABLE))
    finding = only(findings, "CN010")
    assert finding.severity.value == "warning"
    assert finding.fix is not None and finding.fix.applicability == "safe"
    assert [t.text for t in finding.fix.remove_tokens] == ["--disable-hybrid-kv-cache-manager"]


def test_cn010_not_reported_where_any_kv_transfer_config_turns_hma_off() -> None:
    # vg §4 "How HMA was decided": 0.13.0-0.21.0, any --kv-transfer-config turns HMA off.
    cfg = config("0.21.0", ktc(kv_connector="OffloadingConnector", kv_role="kv_both"), DISABLE)
    assert "CN010" not in codes(run(cfg))


def test_cn010_reported_on_0_21_0_for_offload_flags_which_keep_hma_on() -> None:
    # vg §4 row 6: OffloadingConnector has SupportsHMA from 0.21.0; offload flags become a
    # connector after the HMA decision there, so only the flag turns HMA off.
    assert "CN010" in codes(run(config("0.21.0", opt("--kv-offloading-size", "100"), DISABLE)))


def test_cn010_multiconnector_needs_every_child_to_support_hma() -> None:
    # vg §4 row 20; LMCacheConnectorV1 never supports HMA (row 22).
    children = [{"kv_connector": "NixlConnector"}, {"kv_connector": "OffloadingConnector"}]
    good = ktc(kv_connector="MultiConnector", kv_connector_extra_config={"connectors": children})
    assert "CN010" in codes(run(config("0.32.0", good, DISABLE)))
    bad_children = [{"kv_connector": "NixlConnector"}, {"kv_connector": "LMCacheConnectorV1"}]
    bad = ktc(kv_connector="MultiConnector", kv_connector_extra_config={"connectors": bad_children})
    assert "CN010" not in codes(run(config("0.32.0", bad, DISABLE)))


def test_cn010_lmcache_mp_connector_is_decided_at_import_time_so_only_info() -> None:
    # vg §4 row 21: LMCacheMPConnector's class is chosen at import time.
    cfg = config("0.32.0", ktc(kv_connector="LMCacheMPConnector", kv_role="kv_both"), DISABLE)
    finding = only(run(cfg), "CN010")
    assert finding.severity.value == "info"
    assert finding.fix is not None and finding.fix.applicability == "unsafe"


def test_cn011_state_hybrid_with_a_non_hma_connector_fails_to_start_in_every_release() -> None:
    # vllm v0.32.0 vllm/v1/core/kv_cache_utils.py unify_hybrid_kv_cache_specs raises
    # "Hybrid KV cache manager is disabled but failed to convert the KV cache specs to one
    # unified type" for attention + Mamba specs; the check predates 0.23.0's warning text.
    cfg = ktc(kv_connector="LMCacheConnectorV1", kv_role="kv_both")
    for version in ("0.17.0", "0.22.0", "0.23.0", "0.32.0"):
        assert only(run(config(version, cfg), model=JAMBA), "CN011").severity.value == "error"
    assert only(run(config("0.32.0", cfg), model=GEMMA3), "CN011").severity.value == "warning"
    assert "CN011" not in codes(run(config("0.32.0", cfg, model="org/unknown-model")))


def test_cn012_native_offload_fails_on_0_20_x_not_0_21_0() -> None:
    # vg §2 row 24: the factory error fires on 0.11.1-0.20.x (the field guide says <= 0.22.x).
    finding = only(run(config("0.20.0", opt("--kv-offloading-size", "100"))), "CN012")
    assert "OffloadingConnector does not support HMA" in finding.message
    assert "CN012" not in codes(run(config("0.21.0", opt("--kv-offloading-size", "100"))))


def test_cn012_lmcache_backend_fails_through_0_21_x() -> None:
    # vg §2 row 24: with --kv-offloading-backend lmcache (LMCacheConnectorV1) through 0.21.x.
    flags = (opt("--kv-offloading-backend", "lmcache"), opt("--kv-offloading-size", "100"))
    assert "CN012" in codes(run(config("0.21.0", *flags)))
    assert "CN012" not in codes(run(config("0.22.0", *flags)))


def test_cn012_quiet_where_an_explicit_kv_transfer_config_turned_hma_off_first() -> None:
    # vllm v0.11.2 vllm/config/vllm.py: __post_init__ turns HMA off for any
    # kv_transfer_config (line 705) before _post_init_kv_transfer_config converts
    # --kv-offloading-* (line 776); 0.13-0.21 do the same with the tri-state flag unset.
    # With the user's own --kv-transfer-config the factory never sees HMA on.
    offload = (opt("--kv-offloading-backend", "native"), opt("--kv-offloading-size", "100"))
    nixl = ktc(kv_connector="NixlConnector", kv_role="kv_both")
    for version in ("0.11.2", "0.12.0", "0.20.0"):
        assert "CN012" not in codes(run(config(version, *offload, nixl))), version
        # Nearest neighbour: the same offload flags alone keep HMA on, and startup fails.
        assert "CN012" in codes(run(config(version, *offload))), version


def test_cn012_forcing_hma_on_with_a_non_hma_connector() -> None:
    # vg §2 row 25: on 0.23.0+ the factory error needs --no-disable-hybrid-kv-cache-manager.
    force = opt(
        "--disable-hybrid-kv-cache-manager", False, written="--no-disable-hybrid-kv-cache-manager"
    )
    cfg = config("0.32.0", ktc(kv_connector="LMCacheConnectorV1", kv_role="kv_both"), force)
    assert "--no-disable-hybrid-kv-cache-manager" in only(run(cfg), "CN012").message


def test_cn013_names_the_connector_because_vllm_no_longer_does() -> None:
    # vg §2 row 25: only 0.22.x's warning names the connector.
    cfg = ktc(kv_connector="LMCacheConnectorV1", kv_role="kv_both")
    later = only(run(config("0.23.0", cfg)), "CN013")
    assert "LMCacheConnectorV1" in later.message and "does not name" in later.message
    assert "names the connector" in only(run(config("0.22.0", cfg)), "CN013").message


def test_cn001_size_alone_is_ignored_on_0_11_1_to_0_13_x() -> None:
    # vg §4 row 2.
    assert "CN001" in codes(run(config("0.13.0", opt("--kv-offloading-size", "100"))))
    assert "CN001" not in codes(run(config("0.14.0", opt("--kv-offloading-size", "100"))))
    with_backend = config(
        "0.13.0", opt("--kv-offloading-size", "100"), opt("--kv-offloading-backend", "native")
    )
    assert "CN001" not in codes(run(with_backend))


def test_cn002_offload_flags_replace_the_users_connector() -> None:
    # vg §5 item 2.
    cfg = config(
        "0.32.0",
        opt("--kv-offloading-size", "200"),
        ktc(kv_connector="NixlConnector", kv_role="kv_producer"),
    )
    finding = only(run(cfg), "CN002")
    assert "NixlConnector" in finding.message and "OffloadingConnector" in finding.message


def test_cn005_size_ignored_with_the_lmcache_backend_from_0_23_0() -> None:
    # vg §4 row 27: lmcache backend -> LMCacheMPConnector from 0.23.0, size not passed on.
    flags = (opt("--kv-offloading-backend", "lmcache"), opt("--kv-offloading-size", "200"))
    assert "LMCacheMPConnector" in only(run(config("0.23.0", *flags)), "CN005").message
    assert "CN005" not in codes(run(config("0.22.0", *flags)))


def test_cn020_lmcache_with_tp_needs_pythonhashseed() -> None:
    flags = (
        opt("--tensor-parallel-size", "4"),
        ktc(kv_connector="LMCacheMPConnector", kv_role="kv_both"),
    )
    assert "CN020" in codes(run(config("0.32.0", *flags)))
    assert "CN020" not in codes(run(config("0.32.0", *flags, env={"PYTHONHASHSEED": "0"})))
    # The MP server is another process whatever the TP size (vLLM#42625 was fixed by
    # PYTHONHASHSEED=0): reported at TP 1 too. Nearest neighbour: the in-process
    # LMCacheConnectorV1 with a local CPU tier at TP 1 hashes in one process.
    single = ktc(kv_connector="LMCacheMPConnector", kv_role="kv_both")
    assert "CN020" in codes(run(config("0.32.0", single)))
    local = ktc(kv_connector="LMCacheConnectorV1", kv_role="kv_both")
    assert "CN020" not in codes(run(config("0.32.0", local)))
    remote = {"LMCACHE_REMOTE_URL": "redis://cache:6379"}
    assert "CN020" in codes(run(config("0.32.0", local, env=remote)))


def test_cn022_shared_native_tier_needs_pythonhashseed_whatever_the_tp() -> None:
    # vllm v0.28.0 vllm/v1/core/kv_cache_utils.py: NONE_HASH is os.urandom(32) unless
    # PYTHONHASHSEED is set, so an fs tier another instance reads never hits (from 0.29.0
    # sha256 starts from a fixed seed: tests/audit/test_premises.py).
    extra = {
        "spec_name": "TieringOffloadingSpec",
        "secondary_tiers": [{"type": "fs", "path": "/kv"}],
    }
    cfg = ktc(
        kv_connector="OffloadingConnector", kv_role="kv_both", kv_connector_extra_config=extra
    )
    assert only(run(config("0.28.0", cfg)), "CN022").severity.value == "warning"
    assert "CN022" not in codes(run(config("0.28.0", cfg, env={"PYTHONHASHSEED": "0"})))
    cpu_only = ktc(kv_connector="OffloadingConnector", kv_role="kv_both")
    assert "CN022" not in codes(run(config("0.28.0", cpu_only)))


def test_cn021_p2p_tier_needs_pythonhashseed_on_0_27_0_to_0_28_x_only() -> None:
    # vg §2 row 12: starts in 0.27.0 (not 0.26.0), lifted in 0.29.0.
    extra = {"spec_name": "TieringOffloadingSpec", "secondary_tiers": [{"type": "p2p"}]}
    cfg = ktc(
        kv_connector="OffloadingConnector", kv_role="kv_both", kv_connector_extra_config=extra
    )
    assert [
        v for v in ("0.26.0", "0.27.0", "0.28.0", "0.29.0") if "CN021" in codes(run(config(v, cfg)))
    ] == [
        "0.27.0",
        "0.28.0",
    ]


def test_cn030_offload_with_prefix_caching_off() -> None:
    off = opt("--enable-prefix-caching", False, written="--no-enable-prefix-caching")
    # Native offload looks blocks up by prefix-cache hashes: it runs but hits nothing (warning).
    finding = only(run(config("0.32.0", opt("--kv-offloading-size", "100"), off)), "CN030")
    assert finding.severity.value == "warning"
    assert "CN030" not in codes(run(config("0.32.0", ktc(kv_connector="NixlConnector"), off)))


def test_cn030_quiet_for_lmcache_connectors_with_prefix_caching_off() -> None:
    # The scheduler asks every connector for external hits whatever enable_prefix_caching
    # says (vllm v0.32.0 vllm/v1/core/sched/scheduler.py, get_num_new_matched_tokens), and
    # LMCache's examples run LMCacheConnectorV1 with --no-enable-prefix-caching.
    off = opt("--enable-prefix-caching", False, written="--no-enable-prefix-caching")
    for name in ("LMCacheConnectorV1", "LMCacheMPConnector"):
        cfg = config("0.32.0", ktc(kv_connector=name, kv_role="kv_both"), off)
        assert "CN030" not in codes(run(cfg))


def test_cn031_fp8_kv_cache_warns_unless_scales_are_computed() -> None:
    # vg §2 row 5: --calculate-kv-scales still computed dynamic scales through 0.27.1.
    # Scale 1.0 clips large keys and values: outputs break, so a warning, not a note.
    finding = only(run(config("0.32.0", opt("--kv-cache-dtype", "fp8"))), "CN031")
    assert finding.severity.value == "warning"
    both = config("0.27.1", opt("--kv-cache-dtype", "fp8"), opt("--calculate-kv-scales"))
    assert "CN031" not in codes(run(both))
    assert "CN031" not in codes(run(config("0.32.0", opt("--kv-cache-dtype", "bfloat16"))))


def test_cn032_enforce_eager_with_offload() -> None:
    cfg = config("0.32.0", opt("--kv-offloading-size", "100"), opt("--enforce-eager"))
    assert only(run(cfg), "CN032").fix is not None
    assert "CN032" not in codes(run(config("0.32.0", opt("--enforce-eager"))))


def test_cn033_retention_interval_must_be_a_block_multiple() -> None:
    # vg §4 row 32.
    cfg = config(
        "0.32.0", opt("--prefix-cache-retention-interval", "100"), opt("--block-size", "32")
    )
    assert "use 96 or 128" in only(run(cfg), "CN033").message
    fine = config(
        "0.32.0", opt("--prefix-cache-retention-interval", "128"), opt("--block-size", "32")
    )
    assert "CN033" not in codes(run(fine))


def test_simple_cpu_offload_env_swaps_the_native_connector() -> None:
    # rules/curated/backend_connector.toml: VLLM_USE_SIMPLE_KV_OFFLOAD=1 from 0.19.0.
    cfg = config(
        "0.32.0", opt("--kv-offloading-size", "100"), env={"VLLM_USE_SIMPLE_KV_OFFLOAD": "1"}
    )
    connector = context(cfg).connector
    assert connector is not None and connector.name == "SimpleCPUOffloadConnector"


def test_cn034_mamba_cache_mode_all_forces_mrv1_on_0_30_and_0_31() -> None:
    # vg §4 row 30: deprecated on 0.30.0-0.31.x (warns, forces MRV1); rejected from 0.32.0.
    flag = opt("--mamba-cache-mode", "all")
    finding = only(run(config("0.31.0", flag)), "CN034")
    assert finding.fix is not None and finding.fix.replacement == ("--mamba-cache-mode", "align")
    assert "CN034" not in codes(run(config("0.29.0", flag)))
    assert "CN034" not in codes(run(config("0.32.0", flag)))  # VG005 there instead


def test_cn035_fastsafetensors_without_gds_under_tp() -> None:
    # vg §2 row 41: nogds=True whenever TP > 1.
    fst = opt("--load-format", "fastsafetensors")
    assert "CN035" in codes(run(config("0.32.0", fst, opt("--tensor-parallel-size", "8"))))
    assert "CN035" not in codes(run(config("0.32.0", fst)))


def _checkpoint(tmp_path: Path, quantization: dict[str, object] | None) -> str:
    """A local checkpoint directory whose config.json is a Llama-3.1-8B one
    (https://huggingface.co/meta-llama/Llama-3.1-8B/blob/main/config.json), with
    ``quantization`` as its quantization_config when given."""
    raw: dict[str, object] = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 4096,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "max_position_embeddings": 131072,
        "torch_dtype": "bfloat16",
    }
    if quantization is not None:
        raw["quantization_config"] = quantization
    (tmp_path / "config.json").write_text(json.dumps(raw))
    return str(tmp_path)


def test_cn031_is_an_error_when_the_local_checkpoint_declares_no_kv_scales(
    tmp_path: Path,
) -> None:
    # Impact: wrong outputs without an error (the thread); certain when the
    # checkpoint's own config declares no quantized KV cache.
    plain = _checkpoint(tmp_path, None)
    fp8 = opt("--kv-cache-dtype", "fp8")
    finding = only(run(config("0.32.0", fp8, model=plain)), "CN031")
    assert finding.severity is Severity.error and "declares no quantized KV" in finding.message
    # A hub name kvtool cannot open: it may ship scales, so a warning.
    assert only(run(config("0.32.0", fp8)), "CN031").severity is Severity.warning


def test_cn031_is_quiet_for_a_checkpoint_calibrated_with_kv_scales(tmp_path: Path) -> None:
    # neuralmagic/Meta-Llama-3-8B-Instruct-FP8-KV config.json: compressed-tensors with a
    # kv_cache_scheme (static per-tensor k/v scales in the weights).
    scheme = {
        "quant_method": "compressed-tensors",
        "kv_cache_scheme": {"num_bits": 8, "type": "float", "strategy": "tensor"},
    }
    calibrated = _checkpoint(tmp_path, scheme)
    fp8 = opt("--kv-cache-dtype", "fp8")
    assert "CN031" not in codes(run(config("0.32.0", fp8, model=calibrated)))
