"""Every checkable claim of the field guide (shared/seeds/004_6693fa353686f930.txt) vs the audit.

Each test cites its row of the claim table in shared/reference/version-gates.md §4 (or
the field-guide section) and shows the audit following the wheels. The rows the wheels
correct (§2: rows 4, 5, 9, 12, 13, 24, 25, plus 7, 27 and 28 in part) are marked
CORRECTED and assert the wheels' answer, not the guide's.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from packaging.version import Version

from kvtool.audit.context import ModelFacts
from kvtool.audit.model import ServeOption
from kvtool.releases import available_versions
from tests.audit.rulekit import codes, config, context, ktc, only, opt, run
from tests.conftest import REPO_ROOT, CliResult

DISABLE = opt("--disable-hybrid-kv-cache-manager")
SIZE = opt("--kv-offloading-size", "100")


def at(version: str, *options: ServeOption, env: dict[str, str] | None = None) -> list[str]:
    """Codes the config rules report for these options at ``version`` (security floor aside)."""
    return codes(run(config(version, *options, env=env)))


# Row 1: native CPU KV offload (OffloadingConnector) first in 0.11.0.
def test_row1_offloading_connector_registered_from_0_11_0() -> None:
    cfg = ktc(kv_connector="OffloadingConnector", kv_role="kv_both")
    assert "first appears in 0.11.0" in only(run(config("0.10.2", cfg)), "VG020").message
    assert "VG020" not in at("0.11.0", cfg)


# Row 2: --kv-offloading-size / --kv-offloading-backend first in 0.11.1 (caveat: the size
# alone does nothing on 0.11.1-0.13.x).
def test_row2_offloading_flags_from_0_11_1_and_size_alone_noop_until_0_14_0() -> None:
    assert "first appears in 0.11.1" in only(run(config("0.11.0", SIZE)), "VG001").message
    assert "CN001" in at("0.11.1", SIZE) and "CN001" in at("0.13.0", SIZE)
    assert "CN001" not in at("0.14.0", SIZE)


# Row 3: --calculate-kv-scales removed in 0.28.0, accepted through 0.27.1.
def test_row3_calculate_kv_scales_removed_in_0_28_0() -> None:
    assert "VG002" in at("0.28.0", opt("--calculate-kv-scales"))
    assert "VG002" not in at("0.27.1", opt("--calculate-kv-scales"))


# Row 4 CORRECTED: deprecated in 0.19.0, not "pre-0.19" (none in 0.18.0 and 0.18.1).
def test_row4_calculate_kv_scales_deprecated_from_0_19_0_not_before() -> None:
    assert at("0.18.1", opt("--calculate-kv-scales")) == []
    assert "VG003" in at("0.19.0", opt("--calculate-kv-scales"))


# Row 5 CORRECTED: through 0.27.1 the flag still computed dynamic k/v scales, so FP8 KV
# with it gets no "scale 1.0" note; from 0.28.0 the scales default to 1.0.
def test_row5_calculate_kv_scales_still_worked_through_0_27_1() -> None:
    fp8 = opt("--kv-cache-dtype", "fp8")
    assert "CN031" not in at("0.27.1", fp8, opt("--calculate-kv-scales"))
    assert {"VG002", "CN031"} <= set(at("0.28.0", fp8, opt("--calculate-kv-scales")))
    message = only(run(config("0.27.1", opt("--calculate-kv-scales"))), "VG003").message
    assert "no effect" not in message


# Rows 6 and 24 CORRECTED: native offload + HMA from 0.21.0; the factory error fired on
# 0.11.1-0.20.x (GPU), not "<= 0.22.x".
@pytest.mark.parametrize(
    ("version", "fails"), [("0.11.1", True), ("0.20.0", True), ("0.21.0", False), ("0.22.0", False)]
)
def test_row24_native_offload_hma_error_only_up_to_0_20_x(version: str, fails: bool) -> None:
    native = opt("--kv-offloading-backend", "native")  # needed on 0.11.1-0.13.x (row 2)
    assert ("CN012" in at(version, SIZE, native)) is fails


# Row 24 CORRECTED (lmcache part): with --kv-offloading-backend lmcache through 0.21.x.
def test_row24_lmcache_backend_hma_error_through_0_21_x() -> None:
    flags = (opt("--kv-offloading-backend", "lmcache"), SIZE)
    assert "CN012" in at("0.21.0", *flags) and "CN012" not in at("0.22.0", *flags)


# Row 7 CORRECTED in part: multi-tier from 0.22.0, but the fs tier is `fs_python` there.
def test_row7_fs_tier_name_on_0_22_x() -> None:
    extra = {"spec_name": "TieringOffloadingSpec", "secondary_tiers": [{"type": "fs"}]}
    cfg = ktc(kv_connector="OffloadingConnector", kv_connector_extra_config=extra)
    assert "VG031" in at("0.22.1", cfg) and "VG031" not in at("0.23.0", cfg)
    python_tier = ktc(
        kv_connector="OffloadingConnector",
        kv_connector_extra_config={
            "spec_name": "TieringOffloadingSpec",
            "secondary_tiers": [{"type": "fs_python"}],
        },
    )
    assert "VG031" not in at("0.22.0", python_tier)
    assert "VG031" in at("0.21.0", cfg)  # TieringOffloadingSpec itself arrives in 0.22.0


# Row 8: tier types at 0.32.0 are example, fs, p2p, obj, kvcr (kvcr from 0.30.0).
@pytest.mark.parametrize("tier", ["example", "fs", "p2p", "obj", "kvcr"])
def test_row8_registered_tiers_at_0_32_0(tier: str) -> None:
    extra = {"spec_name": "TieringOffloadingSpec", "secondary_tiers": [{"type": tier}]}
    cfg = ktc(kv_connector="OffloadingConnector", kv_connector_extra_config=extra)
    assert "VG031" not in at("0.32.0", cfg)
    assert ("VG031" in at("0.29.0", cfg)) is (tier == "kvcr")


# Row 9 CORRECTED: HMA is kept on for capable connectors from 0.22.0 (not 0.23.0), so the
# flag is already redundant there.
def test_row9_redundant_hma_flag_from_0_22_0() -> None:
    assert "CN010" in at("0.22.0", SIZE, DISABLE)
    assert "CN010" in at("0.23.0", SIZE, DISABLE)


# Row 10: P2pNcclConnector removed in 0.24.0; the p2p tier needs 0.25.0.
def test_row10_p2p_nccl_connector_removed_in_0_24_0() -> None:
    message = only(run(config("0.24.0", ktc(kv_connector="P2pNcclConnector"))), "VG021").message
    assert "0.24.0" in message and "0.25.0" in message
    p2p = ktc(
        kv_connector="OffloadingConnector",
        kv_connector_extra_config={
            "spec_name": "TieringOffloadingSpec",
            "secondary_tiers": [{"type": "p2p"}],
        },
    )
    assert "VG031" in at("0.24.0", p2p) and "VG031" not in at("0.25.0", p2p)


# Row 11: VLLM_P2P_SIDE_CHANNEL_HOST / _PORT are new in 0.26.0.
@pytest.mark.parametrize("name", ["VLLM_P2P_SIDE_CHANNEL_HOST", "VLLM_P2P_SIDE_CHANNEL_PORT"])
def test_row11_p2p_side_channel_env_vars_from_0_26_0(name: str) -> None:
    assert (
        "first appears in 0.26.0" in only(run(config("0.25.0", env={name: "x"})), "VG010").message
    )
    assert at("0.26.0", env={name: "x"}) == []


# Row 12 CORRECTED: the hard PYTHONHASHSEED check starts in 0.27.0 (not 0.26.0), lifted in 0.29.0.
def test_row12_p2p_pythonhashseed_check_0_27_0_to_0_28_x() -> None:
    extra = {"spec_name": "TieringOffloadingSpec", "secondary_tiers": [{"type": "p2p"}]}
    cfg = ktc(kv_connector="OffloadingConnector", kv_connector_extra_config=extra)
    assert [
        v for v in ("0.26.0", "0.27.0", "0.27.1", "0.28.0", "0.29.0") if "CN021" in at(v, cfg)
    ] == [
        "0.27.0",
        "0.27.1",
        "0.28.0",
    ]


# Row 13 CORRECTED: the newest release is not 0.32.0 (0.33.0 when the guide was checked);
# without --vllm-version the audit checks against the newest table and says so.
def test_row13_newest_release_is_the_newest_table(kvtool_cli: Callable[..., CliResult]) -> None:
    newest = available_versions()[-1]
    assert Version(newest) > Version("0.32.0")
    result = kvtool_cli("audit", "--output-format", "json", "--", "vllm", "serve", "m")
    target = json.loads(result.stdout)["target"]
    assert target["vllm_version"] == newest and target["source"] == "newest"
    assert newest in result.stderr


# Row 13 (0.33.0 nuance): --kv-cache-dtype is no longer checked by argparse in 0.33.0.
def test_row13_kv_cache_dtype_typo_rejected_by_argparse_up_to_0_32_only() -> None:
    assert "VG005" in at("0.32.0", opt("--kv-cache-dtype", "fp9"))
    assert "VG005" not in at("0.33.0", opt("--kv-cache-dtype", "fp9"))


# Rows 16 and 46: HiSparseConnector registered from 0.30.0 (16 connectors at 0.29.0, 17 after).
def test_row46_hisparse_from_0_30_0() -> None:
    cfg = ktc(kv_connector="HiSparseConnector")
    assert "VG020" in at("0.29.0", cfg) and "VG020" not in at("0.30.0", cfg)


# Rows 17-23: SupportsHMA at 0.32.0. Capable connectors make the flag redundant; the
# in-process LMCacheConnectorV1 and a MultiConnector with it make vLLM turn HMA off.
@pytest.mark.parametrize(
    "connector",
    [
        "OffloadingConnector",
        "NixlConnector",
        "NixlPullConnector",
        "NixlPushConnector",
        "MooncakeConnector",
        "MooncakeStoreConnector",
        "HiSparseConnector",
        "MoRIIOConnector",
        "SimpleCPUOffloadConnector",
    ],
)
def test_rows17_23_hma_capable_connectors_at_0_32_0(connector: str) -> None:
    assert "CN010" in at("0.32.0", ktc(kv_connector=connector), DISABLE)


def test_rows20_22_non_hma_connectors_at_0_32_0() -> None:
    assert "CN013" in at("0.32.0", ktc(kv_connector="LMCacheConnectorV1"))
    multi = ktc(
        kv_connector="MultiConnector",
        kv_connector_extra_config={
            "connectors": [
                {"kv_connector": "NixlConnector"},
                {"kv_connector": "LMCacheConnectorV1"},
            ]
        },
    )
    assert "LMCacheConnectorV1" in only(run(config("0.32.0", multi)), "CN013").message


# Row 21: LMCacheMPConnector's HMA support is decided at import time (external lmcache class).
def test_row21_lmcache_mp_connector_hma_is_dynamic() -> None:
    ctx = context(config("0.32.0", ktc(kv_connector="LMCacheMPConnector")))
    assert ctx.supports_hma("LMCacheMPConnector") is None
    assert (
        only(
            run(config("0.32.0", ktc(kv_connector="LMCacheMPConnector"), DISABLE)), "CN010"
        ).severity.value
        == "info"
    )


# Row 25 CORRECTED: only 0.22.x's warning names the connector.
def test_row25_warning_names_the_connector_only_on_0_22_x() -> None:
    cfg = ktc(kv_connector="LMCacheConnectorV1")
    assert "names the connector" in only(run(config("0.22.1", cfg)), "CN013").message
    assert "does not name the connector" in only(run(config("0.23.0", cfg)), "CN013").message


# Row 26 / field guide "Sizing math": --kv-offloading-size is the total across TP ranks.
def test_row26_size_is_tp_total() -> None:
    message = only(run(config("0.32.0", opt("--tensor-parallel-size", "8"), SIZE)), "SZ001").message
    assert "total over TP x PP = 8 ranks" in message


# Row 27 CORRECTED in part: keeping LMCACHE_MAX_LOCAL_CPU_SIZE consistent only matters on
# 0.11.1-0.22.x (LMCacheConnectorV1); from 0.23.0 the MP connector ignores both.
def test_row27_lmcache_sizing_depends_on_release() -> None:
    flags = (
        opt("--tensor-parallel-size", "4"),
        opt("--kv-offloading-backend", "lmcache"),
        opt("--kv-offloading-size", "400"),
    )
    env = {"LMCACHE_MAX_LOCAL_CPU_SIZE": "400", "PYTHONHASHSEED": "0"}
    assert "SZ003" in at("0.22.0", *flags, env=env) and "SZ005" not in at("0.22.0", *flags, env=env)
    assert {"SZ005", "CN005"} <= set(at("0.23.0", *flags, env=env))


# Row 28 CORRECTED in part: an early MRV2 opt-in on 0.27.x/0.28.0 is the exposed case (#53306).
def test_row28_mrv2_opt_in_before_0_29_0_matches_known_bug() -> None:
    env = {"VLLM_USE_V2_MODEL_RUNNER": "1"}
    bugs = [f.evidence["bug"] for f in run(config("0.28.0", env=env)) if f.code == "SC002"]
    assert bugs == ["vllm-project/vllm#53306"]
    assert "SC002" not in at("0.29.0", env=env)


# Row 29: --mamba-cache-mode all rejected from 0.32.0 (argparse invalid choice); 0.33.0
# deprecates the whole flag and still rejects `all`.
def test_row29_mamba_cache_mode_all() -> None:
    flag = opt("--mamba-cache-mode", "all")
    assert "VG005" not in at("0.31.0", flag)
    assert "VG005" in at("0.32.0", flag)
    assert {"VG003", "VG005"} <= set(at("0.33.0", flag))


# Rows 32-33: --prefix-cache-retention-interval from 0.29.0; the env var gone in 0.30.0.
def test_rows32_33_retention_interval_flag_and_env_var() -> None:
    assert "VG001" in at("0.28.0", opt("--prefix-cache-retention-interval", "64"))
    assert at("0.29.0", opt("--prefix-cache-retention-interval", "64")) == []
    env = {"VLLM_PREFIX_CACHE_RETENTION_INTERVAL": "64"}
    assert "VG011" in at("0.30.0", env=env) and "VG011" not in at("0.29.0", env=env)


# Row 38 / "Offload doesn't help" item 3: prefix caching is on by default; offload
# with it off has nothing to hit against.
def test_row38_prefix_caching_default_on() -> None:
    # SC002 aside: 0.32.0 carries KB-VLLM-52211 (a crash after preemption) for any offload.
    assert [c for c in at("0.32.0", SIZE) if c != "SC002"] == []
    off = opt("--enable-prefix-caching", False, written="--no-enable-prefix-caching")
    assert "CN030" in at("0.32.0", SIZE, off)


# Row 39: --block-size 32 is valid in every release.
@pytest.mark.parametrize("version", ["0.10.2", "0.17.1", "0.32.0", "0.33.0"])
def test_row39_block_size_32_valid(version: str) -> None:
    assert at(version, opt("--block-size", "32")) == []


# Row 40: --load-format fastsafetensors is a flag value; VLLM_USE_FASTSAFETENSOR never existed.
@pytest.mark.parametrize("version", ["0.10.2", "0.22.0", "0.33.0"])
def test_row40_fastsafetensors(version: str) -> None:
    assert at(version, opt("--load-format", "fastsafetensors")) == []
    assert "VG010" in at(version, env={"VLLM_USE_FASTSAFETENSOR": "1"})


# Row 42 / "--cpu-offload-gb is NOT --kv-offloading-size": weights, per GPU.
def test_row42_cpu_offload_gb_is_weights() -> None:
    assert "SZ010" in at("0.32.0", opt("--cpu-offload-gb", "64"))


# Row 47: SimpleCPUOffloadScheduler TOCTOU fixed in 0.22.0 ("Known bugs" footnote).
def test_row47_simple_cpu_offload_toctou_until_0_22_0() -> None:
    env = {"VLLM_USE_SIMPLE_KV_OFFLOAD": "1"}

    def bugs(version: str) -> list[str]:
        return [f.evidence["bug"] for f in run(config(version, SIZE, env=env)) if f.code == "SC002"]

    toctou = "vllm-project/vllm#39702"
    assert toctou in bugs("0.21.0") and toctou not in bugs("0.22.0")


# Row 48: --disable-hybrid-kv-cache-manager and its --no- form exist in every release.
@pytest.mark.parametrize("version", ["0.10.2", "0.33.0"])
def test_row48_hma_flag_and_negative_form_exist(version: str) -> None:
    negative = opt("--no-disable-hybrid-kv-cache-manager", False)
    fact = context(config(version)).flag_fact("--no-disable-hybrid-kv-cache-manager")
    assert fact is not None
    assert "VG001" not in at(version, DISABLE) and "VG001" not in at(version, negative)


# "Is the tag safe to run?": floor 0.22.0 (CVE-2026-48746); 0.14.1 fixes CVE-2026-22778.
def test_security_floor_rows() -> None:
    assert "SC001" in codes(run(config("0.21.0"), security=True))
    assert "SC001" not in codes(run(config("0.22.0"), security=True))
    assert "CVE-2026-22778" not in only(run(config("0.14.1"), security=True), "SC001").message


# "Known bugs": LMCache#3106, LMCacheConnectorV1 unusable on hybrid-attention models.
def test_known_bug_lmcache_3106_on_hybrids() -> None:
    gemma = ModelFacts(name="google/gemma-3-12b-it", hybrid=True, mamba=False)
    found = run(config("0.32.0", ktc(kv_connector="LMCacheConnectorV1")), model=gemma)
    assert "LMCache/LMCache#3106" in [f.evidence.get("bug") for f in found]


# "Done when" item 1 on the shipped example: removed flags, per-rank sizing and the weight
# flag are all accounted for on the example that carries them.
def test_done_when_item1_on_the_shipped_example(kvtool_cli: Callable[..., CliResult]) -> None:
    result = kvtool_cli(
        "audit",
        str(REPO_ROOT / "examples" / "lmcache-tp4.sh"),
        "--vllm-version",
        "0.32.0",
        "--output-format",
        "json",
    )
    found = {f["code"] for f in json.loads(result.stdout)["findings"]}
    assert {"VG002", "CN005", "SZ005"} <= found


# "Sizing math": the guide says "LMCache env vars win on the backend side". CORRECTED by
# sizing.md §0 item 3 / §2.4: lmcache.* keys in kv_connector_extra_config (which vLLM
# fills with size/(TP*PP) on the in-process path) override the env vars.
def test_lmcache_extra_config_beats_env_vars() -> None:
    flags = (
        opt("--tensor-parallel-size", "2"),
        opt("--kv-offloading-backend", "lmcache"),
        opt("--kv-offloading-size", "100"),
    )
    env = {"LMCACHE_MAX_LOCAL_CPU_SIZE": "100", "PYTHONHASHSEED": "0"}
    message = only(run(config("0.22.0", *flags, env=env)), "SZ003").message
    assert "lmcache.max_local_cpu_size=50" in message and "overrides" in message
