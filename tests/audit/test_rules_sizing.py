"""Golden tests for the SZ rules; the arithmetic expectations are sizing.md's (§4.2 F3, §5)."""

from __future__ import annotations

from tests.audit.rulekit import codes, config, ktc, only, opt, run


def test_sz001_per_gpu_looking_size_with_tp8() -> None:
    # sizing.md §4.3 G-S3: SGLang 200 GB/GPU x TP8 -> vLLM --kv-offloading-size 1600; the
    # 100 GiB here is below one H200's 141 GB, so it reads as per GPU: 100/8 = 12.5 per rank.
    finding = only(
        run(
            config("0.32.0", opt("--tensor-parallel-size", "8"), opt("--kv-offloading-size", "100"))
        ),
        "SZ001",
    )
    assert "each gets 12.5 GiB" in finding.message
    assert "use 800" in finding.message
    assert finding.fix is not None and finding.fix.applicability == "unsafe"
    assert finding.fix.replacement == ("--kv-offloading-size", "800")


def test_sz001_not_for_totals_larger_than_one_gpu_or_tp1() -> None:
    assert "SZ001" not in codes(
        run(
            config(
                "0.32.0", opt("--tensor-parallel-size", "8"), opt("--kv-offloading-size", "1600")
            )
        )
    )
    assert "SZ001" not in codes(run(config("0.32.0", opt("--kv-offloading-size", "100"))))


def test_sz002_in_process_lmcache_size_is_per_rank() -> None:
    # sizing.md §5 row 1 (LMCache #2901): the env var is allocated by every TP worker.
    cfg = config(
        "0.32.0",
        opt("--tensor-parallel-size", "8"),
        ktc(kv_connector="LMCacheConnectorV1", kv_role="kv_both"),
        env={"LMCACHE_MAX_LOCAL_CPU_SIZE": "200", "PYTHONHASHSEED": "0"},
    )
    finding = only(run(cfg, host_ram_gib=1024), "SZ002")
    assert "1600 GiB" in finding.message
    assert "SZ002" not in codes(run(cfg, host_ram_gib=2048))
    assert "SZ002" not in codes(run(cfg))  # host RAM unknown


def test_sz003_vllm_passes_size_over_world_per_rank_on_the_in_process_path() -> None:
    # vg §4 row 27: lmcache.max_local_cpu_size = size/(TP*PP) on 0.11.1-0.22.x.
    flags = (
        opt("--tensor-parallel-size", "4"),
        opt("--kv-offloading-backend", "lmcache"),
        opt("--kv-offloading-size", "400"),
    )
    finding = only(
        run(config("0.22.0", *flags, env={"LMCACHE_MAX_LOCAL_CPU_SIZE": "400"})), "SZ003"
    )
    assert "lmcache.max_local_cpu_size=100" in finding.message
    assert "SZ003" not in codes(
        run(config("0.22.0", *flags, env={"LMCACHE_MAX_LOCAL_CPU_SIZE": "100"}))
    )


def test_sz004_native_pool_larger_than_host_ram() -> None:
    cfg = config("0.32.0", opt("--tensor-parallel-size", "8"), opt("--kv-offloading-size", "1600"))
    assert "SZ004" in codes(run(cfg, host_ram_gib=1024))
    assert "SZ004" not in codes(run(cfg, host_ram_gib=2048))


def test_sz005_lmcache_env_size_ignored_by_the_mp_connector() -> None:
    # sizing.md §4.4 item 1; vg §2 row 27 (field guide advice only holds up to 0.22.x).
    flags = (opt("--kv-offloading-backend", "lmcache"), opt("--kv-offloading-size", "100"))
    env = {"LMCACHE_MAX_LOCAL_CPU_SIZE": "100"}
    assert "SZ005" in codes(run(config("0.23.0", *flags, env=env)))
    assert "SZ005" not in codes(run(config("0.22.0", *flags, env=env)))


def test_sz010_cpu_offload_gb_is_weight_offload() -> None:
    # vg §4 row 42: --cpu-offload-gb offloads weights, per GPU.
    finding = only(run(config("0.32.0", opt("--cpu-offload-gb", "64"))), "SZ010")
    assert "weights" in finding.message
    assert finding.fix is not None and finding.fix.applicability == "display"


def test_sz004_cpu_bytes_to_use_in_the_extra_config_is_weighed_against_host_ram() -> None:
    # The case: `cpu_bytes_to_use` never compared with host RAM. Shape of vLLM's
    # OffloadingConnector config (vllm v0.32.0 vllm/v1/kv_offload/cpu/spec.py reads
    # kv_connector_extra_config["cpu_bytes_to_use"], a total over the ranks).
    two_tib = 2 * 1024**4
    native = ktc(
        kv_connector="OffloadingConnector",
        kv_role="kv_both",
        kv_connector_extra_config={"cpu_bytes_to_use": two_tib},
    )
    cfg = config("0.32.0", opt("--tensor-parallel-size", "8"), native)
    finding = only(run(cfg, host_ram_gib=1536), "SZ004")
    assert "2048 GiB" in finding.message and "cpu_bytes_to_use" in finding.message
    assert "SZ004" not in codes(run(cfg, host_ram_gib=4096))
    assert "SZ004" not in codes(run(cfg))  # host RAM unknown


def test_sz004_adds_a_multiconnector_childs_tier_to_lmcache() -> None:
    # A MultiConnector with two host tiers (shape: vLLM's MultiConnector docs,
    # https://github.com/vllm-project/vllm/blob/v0.32.0/vllm/distributed/kv_transfer/kv_connector/v1/multi_connector.py):
    # 600 GiB native + 8 x 100 GiB LMCache = 1400 GiB, each alone under the 1 TiB host.
    multi = ktc(
        kv_connector="MultiConnector",
        kv_role="kv_both",
        kv_connector_extra_config={
            "connectors": [
                {
                    "kv_connector": "OffloadingConnector",
                    "kv_role": "kv_both",
                    "kv_connector_extra_config": {"cpu_bytes_to_use": 600 * 1024**3},
                },
                {
                    "kv_connector": "LMCacheConnectorV1",
                    "kv_role": "kv_both",
                    "kv_connector_extra_config": {"lmcache.max_local_cpu_size": 100},
                },
            ]
        },
    )
    cfg = config("0.32.0", opt("--tensor-parallel-size", "8"), multi, env={"PYTHONHASHSEED": "0"})
    found = run(cfg, host_ram_gib=1024)
    assert "1400 GiB" in only(found, "SZ004").message
    assert "SZ002" not in codes(found)  # no per-rank tier alone exceeds the host
    assert "SZ004" not in codes(run(cfg, host_ram_gib=1500))


def test_sz002_reads_the_lmcache_extra_config_key_and_sz004_stays_quiet() -> None:
    # `lmcache.max_local_cpu_size` in kv_connector_extra_config wins over the env var
    # (LMCache v0.5.6 lmcache/integration/vllm/utils.py) and is per rank like it.
    lmcache = ktc(
        kv_connector="LMCacheConnectorV1",
        kv_role="kv_both",
        kv_connector_extra_config={"lmcache.max_local_cpu_size": 200},
    )
    cfg = config("0.32.0", opt("--tensor-parallel-size", "8"), lmcache, env={"PYTHONHASHSEED": "0"})
    found = run(cfg, host_ram_gib=1024)
    assert "1600 GiB" in only(found, "SZ002").message
    assert "SZ004" not in codes(found)  # one finding for one mistake
