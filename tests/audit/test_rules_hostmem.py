"""Host memory beyond the nominal tier size (SZ011) and vllm#53042 (SC002)."""

from __future__ import annotations

from tests.audit.rulekit import codes, config, ktc, only, opt, run

TP2 = opt("--tensor-parallel-size", "2")


def test_pinned_share_is_rounded_up_to_a_power_of_two_before_0_27() -> None:
    # vllm PR #48436: "--kv-offloading-size 80 would cause per-worker RSS of ~67GB (64GB + 3)"
    # at TP 2 - each rank's 40 GiB pinned share becomes 64 GiB.
    finding = only(run(config("0.26.0", opt("--kv-offloading-size", "80"), TP2)), "SZ011")
    assert finding.evidence["pinned_per_rank_gib"] == 64 and finding.evidence["host_gib"] == 128
    assert finding.severity.value == "warning"
    # With a host that cannot hold the rounded pool, it is an error.
    cfg = config("0.26.0", opt("--kv-offloading-size", "80"), TP2)
    assert only(run(cfg, host_ram_gib=100), "SZ011").severity.value == "error"


def test_power_of_two_shares_and_shared_regions_are_quiet() -> None:
    # 128 GiB over 2 ranks is 64 GiB each: nothing to round.
    assert "SZ011" not in codes(run(config("0.26.0", opt("--kv-offloading-size", "128"), TP2)))
    # From 0.27.0 CPUOffloadingSpec maps one SharedOffloadRegion of the requested size
    # (vllm v0.27.0 vllm/v1/kv_offload/cpu/spec.py; PR #50094 measured 10 GiB -> 10 GiB).
    assert "SZ011" not in codes(run(config("0.27.0", opt("--kv-offloading-size", "80"), TP2)))


def test_cpu_bytes_to_use_in_the_extra_config_counts_too() -> None:
    extra = {"cpu_bytes_to_use": 48 << 30}
    cfg = ktc(
        kv_connector="OffloadingConnector", kv_role="kv_both", kv_connector_extra_config=extra
    )
    finding = only(run(config("0.26.0", cfg)), "SZ011")
    assert finding.flag == "cpu_bytes_to_use" and finding.evidence["pinned_per_rank_gib"] == 64


def test_vllm_53042_matches_native_offload_of_a_hybrid_model_only() -> None:
    # https://github.com/vllm-project/vllm/issues/53042: 0.26.0, hybrid GDN+GQA model,
    # --kv-offloading-size N maps 1.92 x N as unreclaimable shmem.
    size = opt("--kv-offloading-size", "200")
    hybrid = run(config("0.26.0", size, model="Qwen/Qwen3.5-27B"))
    assert any(f.code == "SC002" and "53042" in f.message for f in hybrid)
    dense = run(config("0.26.0", size))
    assert not any(f.code == "SC002" and "53042" in f.message for f in dense)
    older = run(config("0.25.0", size, model="Qwen/Qwen3.5-27B"))
    assert not any(f.code == "SC002" and "53042" in f.message for f in older)
