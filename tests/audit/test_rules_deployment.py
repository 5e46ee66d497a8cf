"""Golden tests for the SC rules against rules/curated/security.toml and rules/bugs/."""

from __future__ import annotations

from kvtool.audit.context import ModelFacts
from tests.audit.rulekit import codes, config, ktc, only, opt, run


def test_sc001_security_floor_is_0_22_0() -> None:
    # field guide "Is the tag safe to run?": floor v0.22.0 (CVE-2026-48746).
    finding = only(run(config("0.21.0"), security=True), "SC001")
    assert "CVE-2026-48746" in finding.message and "0.22.0" in finding.message
    assert "SC001" not in codes(run(config("0.22.0"), security=True))


def test_sc001_lists_every_advisory_that_applies() -> None:
    # CVE-2026-22778 affects 0.8.3 through 0.14.0 (fixed 0.14.1).
    message = only(run(config("0.14.0"), security=True), "SC001").message
    assert "CVE-2026-22778" in message and "CVE-2026-48746" in message


def test_sc002_lmcache_v1_on_a_hybrid_model_matches_lmcache_3106() -> None:
    gemma = ModelFacts(name="google/gemma-3-12b-it", hybrid=True, mamba=False)
    cfg = config("0.32.0", ktc(kv_connector="LMCacheConnectorV1", kv_role="kv_both"))
    findings = [f for f in run(cfg, model=gemma) if f.code == "SC002"]
    # 0.32.0 also carries LMCache#4463 (the packed KV layout since vLLM 0.26.0), any model.
    assert {f.evidence["bug"] for f in findings} == {"LMCache/LMCache#3106", "LMCache/LMCache#4463"}
    unknown = [f.evidence["bug"] for f in run(cfg) if f.code == "SC002"]
    assert unknown == ["LMCache/LMCache#4463"]  # model unknown: no model-trait record fires


def test_sc002_env_conditions_must_hold() -> None:
    # LMCache#2942 needs LMCACHE_LOCAL_CPU=False.
    # (MP-mode records that hold for every LMCacheMPConnector config fire in both runs.)
    cfg_opts = (opt("--kv-offloading-backend", "lmcache"), opt("--kv-offloading-size", "100"))

    def bugs(env: dict[str, str]) -> set[str]:
        found = run(config("0.32.0", *cfg_opts, env=env))
        return {f.evidence["bug"] for f in found if f.code == "SC002"}

    without, with_env = bugs({}), bugs({"LMCACHE_LOCAL_CPU": "false"})
    assert "LMCache/LMCache#2942" not in without
    assert with_env - without == {"LMCache/LMCache#2942"}


def test_sc002_fixed_vllm_bugs_only_match_their_range() -> None:
    # vllm#39702: SimpleCPUOffloadScheduler TOCTOU in 0.19.0-0.21.x (proven from the wheels).
    env = {"VLLM_USE_SIMPLE_KV_OFFLOAD": "1"}

    def bugs(version: str) -> list[str]:
        found = run(config(version, opt("--kv-offloading-size", "10"), env=env))
        return [f.evidence["bug"] for f in found if f.code == "SC002"]

    assert "vllm-project/vllm#39702" in bugs("0.21.0")
    assert "vllm-project/vllm#39702" not in bugs("0.22.0")
