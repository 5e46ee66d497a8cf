"""VG013-VG015: LMCache env vars and extra-config keys against rules/lmcache/ (generated
from LMCache wheels by scripts/gen_lmcache_tables.py)."""

from __future__ import annotations

from typing import Any

from kvtool import lmcache
from kvtool.audit.engine import Auditor
from kvtool.audit.inputs import read_text
from kvtool.audit.normalize import normalize
from kvtool.audit.settings import AuditSettings
from tests.audit.rulekit import codes, config, ktc, only, run
from tests.audit.test_engine import FixedTables
from tests.conftest import REPO_ROOT

V1 = ktc(kv_connector="LMCacheConnectorV1", kv_role="kv_both")


def test_misspelt_lmcache_env_var_is_reported_with_the_real_name() -> None:
    # LMCACHE_MAX_LOCAL_CPU_SIZE is read by every tabled release (config name
    # max_local_cpu_size, env name LMCACHE_{NAME.upper()} in lmcache/v1/config.py).
    assert lmcache.releases_with("env_vars", "LMCACHE_MAX_LOCAL_CPU_SIZE")
    env = {"LMCACHE_MAX_LOCAL_CPU_SIZES": "100", "PYTHONHASHSEED": "0"}
    finding = only(run(config("0.32.0", V1, env=env)), "VG013")
    assert "LMCACHE_MAX_LOCAL_CPU_SIZE`" in finding.message
    good = {"LMCACHE_MAX_LOCAL_CPU_SIZE": "100", "LMCACHE_CHUNK_SIZE": "256"}
    assert "VG013" not in codes(run(config("0.32.0", V1, env=good)))


def test_legacy_lm_cache_spelling_names_the_modern_one() -> None:
    finding = only(run(config("0.32.0", V1, env={"LM_CACHE_CHUNK_SIZE": "512"})), "VG014")
    assert "LMCACHE_CHUNK_SIZE" in finding.message


def test_unknown_lmcache_extra_key_is_reported_on_lmcache_connectors_only() -> None:
    extra = {"lmcache.max_local_cpu_sze": 40}
    cfg = ktc(kv_connector="LMCacheConnectorV1", kv_role="kv_both", kv_connector_extra_config=extra)
    finding = only(run(config("0.32.0", cfg)), "VG015")
    assert "lmcache.max_local_cpu_size" in finding.message
    ok = {"lmcache.max_local_cpu_size": 40, "lmcache.chunk_size": 256}
    cfg = ktc(kv_connector="LMCacheConnectorV1", kv_role="kv_both", kv_connector_extra_config=ok)
    assert "VG015" not in codes(run(config("0.32.0", cfg)))


def test_a_variable_only_old_releases_read_is_an_info_naming_them() -> None:
    readers = lmcache.releases_with("env_vars", "LMCACHE_USE_EXPERIMENTAL")
    newest = lmcache.releases()[-1].version
    assert readers and newest not in readers  # generated: dropped after 0.3.x
    env = {"LMCACHE_USE_EXPERIMENTAL": "True"}
    finding = only(run(config("0.32.0", V1, env=env)), "VG013")
    assert finding.severity.value == "info" and readers[-1] in finding.message


def test_mp_connector_in_a_pod_needs_a_server() -> None:
    import msgspec

    mp = ktc(kv_connector="LMCacheMPConnector", kv_role="kv_both")
    cfg = config("0.32.0", mp, env={"PYTHONHASHSEED": "0"})
    pod = msgspec.structs.replace(
        cfg, invocation=msgspec.structs.replace(cfg.invocation, kind="kubernetes")
    )
    assert only(run(pod), "CN023").severity.value == "info"
    assert "CN023" not in codes(run(cfg))  # a shell script: the server may run beside it
    # lmcache.mp.autostart is a key the generated tables know (LMCache 0.5.6).
    assert "0.5.6" in lmcache.releases_with("mp_keys", "lmcache.mp.autostart")
    auto = ktc(
        kv_connector="LMCacheMPConnector",
        kv_role="kv_both",
        kv_connector_extra_config={"lmcache.mp.autostart": True},
    )
    cfg = config("0.32.0", auto, env={"PYTHONHASHSEED": "0"})
    pod = msgspec.structs.replace(
        cfg, invocation=msgspec.structs.replace(cfg.invocation, kind="kubernetes")
    )
    assert "CN023" not in codes(run(pod))


def test_mp_server_sidecar_in_the_pod_satisfies_the_mp_connector() -> None:
    # LMCache's MP server started as `python -m lmcache.v1.multiprocess.server` (LMCache
    # docs, multiprocess mode) in a second container of the engine's pod.
    engine = (
        "      containers:\n"
        "        - name: vllm\n"
        "          image: vllm/vllm-openai:v0.32.0\n"
        "          command: [vllm, serve, Qwen/Qwen3-0.6B, --kv-offloading-backend, lmcache,\n"
        "                    --kv-offloading-size, '40']\n"
        "          env: [{name: PYTHONHASHSEED, value: '0'}]\n"
    )
    server = (
        "        - name: lmcache\n"
        "          image: lmcache/vllm-openai:latest\n"
        "          command: [python3, -m, lmcache.v1.multiprocess.server, --port, '5555']\n"
    )
    head = (
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\n"
        "spec:\n  template:\n    spec:\n"
    )

    def cn023(text: str) -> list[str]:
        auditor = Auditor(FixedTables("0.32.0"), normalize, AuditSettings(vllm_version="0.32.0"))
        report = auditor.run(read_text(text, "d.yaml"))
        return [f.severity.value for f in report.findings if f.code == "CN023"]

    assert cn023(head + engine) == ["info"]
    assert cn023(head + engine + server) == []
    shell = server.replace(
        "[python3, -m, lmcache.v1.multiprocess.server, --port, '5555']",
        "[sh, -c, 'exec lmcache server --port 5555']",
    )
    assert cn023(head + engine + shell) == []


def test_cn062_does_not_judge_a_server_given_gpus_through_a_dra_claim(kvtool_cli: Any) -> None:
    # LMCache#4534's sidecar shares the engine's DRA ResourceClaim: whether that claim
    # holds the GPU is the claim's business, so the rule stays quiet rather than guess.
    path = REPO_ROOT / "tests" / "audit" / "data" / "lmcache_mp" / "server-with-dra-claim.yaml"
    result = kvtool_cli(
        "audit",
        str(path),
        "--vllm-version",
        "0.32.0",
        "--select",
        "CN062",
        "--output-format",
        "json",
    )
    assert result.exit_code == 0, result.stdout
