"""VG016: an LMCache release that cannot start its connector on the target vLLM release.

Facts come from rules/lmcache/vllm_pairs.json (scripts/gen_lmcache_pairs.py, both
projects' wheels). Threads: LMCache#4134 (vLLM 0.19/0.20's MP connector against newer
LMCache: `server_url=` and seven ParallelStrategy arguments); LMCache 0.3.x's
vllm_v1_adapter imports `cdiv` from `vllm.utils`, which vLLM 0.14+ no longer binds there.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from kvtool.audit.engine import Selection, check_config
from kvtool.audit.model import Finding
from kvtool.audit.settings import AuditSettings, apply_cli
from tests.audit.rulekit import config, context, ktc, opt

MP = (ktc(kv_connector="LMCacheMPConnector", kv_role="kv_both"),)
# On 0.32.0 the lmcache backend is LMCacheMPConnector (rules/curated/backend_connector.toml).
MP_BACKEND = (opt("--kv-offloading-backend", "lmcache"), opt("--kv-offloading-size", "40"))


def vg016(version: str, lmcache: str | None, *options: Any) -> list[Finding]:
    ctx = dataclasses.replace(context(config(version, *options)), lmcache_version=lmcache)
    return check_config(ctx, Selection(enabled={"VG016"}))


def test_vllm_0_20_mp_connector_with_lmcache_0_5_6_is_an_error() -> None:
    (finding,) = vg016("0.20.0", "0.5.6", *MP)
    assert finding.severity.value == "error"
    assert "'server_url'" in finding.message and "LMCacheMPConnector" in finding.message


def test_the_same_lmcache_on_a_release_that_uses_lmcaches_own_connector_is_quiet() -> None:
    # vLLM 0.32.0 prefers lmcache.integration.vllm.lmcache_mp_connector when it imports.
    assert vg016("0.32.0", "0.5.6", *MP) == []
    assert vg016("0.32.0", "v0.5.6", *MP_BACKEND) == []  # an image-tag spelling


def test_nothing_is_checked_without_an_lmcache_version_or_an_lmcache_connector() -> None:
    assert vg016("0.20.0", None, *MP) == []
    (old,) = vg016("0.32.0", "0.4.2", *MP_BACKEND)  # the backend's connector is checked too
    assert "BlockAllocationRecord" in old.message
    assert vg016("0.20.0", "0.5.6", opt("--kv-offloading-size", "40")) == []  # native offload


def test_lmcache_v1_connector_uses_lmcaches_adapter_unless_use_native() -> None:
    v1 = ktc(kv_connector="LMCacheConnectorV1", kv_role="kv_both")
    (finding,) = vg016("0.32.0", "0.3.7", v1)
    assert "cdiv" in finding.message
    native = ktc(
        kv_connector="LMCacheConnectorV1",
        kv_role="kv_both",
        kv_connector_extra_config={"use_native": True},
    )
    assert vg016("0.32.0", "0.3.7", native) == []


def test_an_lmcache_release_outside_the_table_is_one_info() -> None:
    (finding,) = vg016("0.32.0", "9.0.0", *MP)
    assert finding.severity.value == "info" and "not checked" in finding.message


def test_the_cli_value_reaches_the_settings() -> None:
    assert apply_cli(AuditSettings(), lmcache_version="0.4.7").lmcache_version == "0.4.7"


def known_bugs(version: str, lmcache: str | None, *options: Any) -> list[str]:
    ctx = dataclasses.replace(context(config(version, *options)), lmcache_version=lmcache)
    return [f.evidence["bug"] for f in check_config(ctx, Selection(enabled={"SC002"}))]


def test_lmcache_3688_matches_the_lmcache_releases_that_ship_the_assertion() -> None:
    # LMCache#3688: request_finished's FINISHED_ABORTED branch asserts lmcache_engine is not
    # None (lmcache 0.5.0 wheel, vllm_v1_adapter.py:1849); 0.5.1 guards it (LMCache#3337).
    v1 = ktc(kv_connector="LMCacheConnectorV1", kv_role="kv_both")
    assert "LMCache/LMCache#3688" in known_bugs("0.32.0", "0.5.0", v1)
    assert "LMCache/LMCache#3688" in known_bugs("0.32.0", "0.4.5", v1)
    assert "LMCache/LMCache#3688" not in known_bugs("0.32.0", "0.5.1", v1)  # guarded
    assert "LMCache/LMCache#3688" not in known_bugs("0.32.0", "0.4.4", v1)  # not yet there
    # The scheduler builds the engine with bypass lookup on (vllm_service_factory.py:166).
    bypass = {"LMCACHE_ENABLE_SCHEDULER_BYPASS_LOOKUP": "True"}
    ctx = context(config("0.32.0", v1, env=bypass))
    ctx = dataclasses.replace(ctx, lmcache_version="0.5.0")
    bugs = [f.evidence["bug"] for f in check_config(ctx, Selection(enabled={"SC002"}))]
    assert bugs == ["LMCache/LMCache#4463"]  # only the layout bug of vLLM 0.26+ remains
    # Unknown LMCache release: a fixed LMCache row says nothing; an open one still applies.
    assert "LMCache/LMCache#3688" not in known_bugs("0.32.0", None, v1)
    mp = ktc(kv_connector="LMCacheMPConnector", kv_role="kv_both")
    assert "LMCache/LMCache#3688" not in known_bugs("0.32.0", "0.5.0", mp)
