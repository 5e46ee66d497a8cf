"""rules/lmcache/: LMCache facts generated from its wheels (scripts/gen_lmcache_tables.py)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from packaging.version import Version

from kvtool import lmcache
from tests.conftest import REPO_ROOT
from tests.releases.wheelcache import pypi_reachable

GENERATOR = REPO_ROOT / "scripts" / "gen_lmcache_tables.py"


def test_every_table_records_its_wheel_and_the_index_lists_them_in_order() -> None:
    tabled = lmcache.releases()
    assert tabled, "no LMCache tables"
    versions = [Version(r.version) for r in tabled]
    assert versions == sorted(versions)
    for release in tabled:
        assert release.wheel.filename.startswith(f"lmcache-{release.version}-")
        assert re.fullmatch(r"[0-9a-f]{64}", release.wheel.sha256)


def test_env_names_follow_the_config_names() -> None:
    # lmcache v0.5.6 lmcache/v1/config.py _update_config_from_env: get_env_name(name) is
    # f"LMCACHE_{attr_name.upper()}" for every _CONFIG_DEFINITIONS key.
    # https://github.com/LMCache/LMCache/blob/v0.5.6/lmcache/v1/config.py
    newest = lmcache.releases()[-1]
    assert "chunk_size" in newest.config_names and "LMCACHE_CHUNK_SIZE" in newest.env_vars
    assert {f"LMCACHE_{n.upper()}" for n in newest.config_names} <= set(newest.env_vars)
    assert "LMCACHE_CONFIG_FILE" in newest.env_vars  # read directly (os.getenv)


def test_mp_keys_include_the_lazy_offload_knobs_built_by_a_helper() -> None:
    # lmcache v0.5.6 lazy_offload_policy/eviction_aware.py: number("horizon_steps", ...)
    # reads f"lmcache.mp.lazy_offload_{name}"; vllm_multi_process_adapter.py
    # ExtraConfigDefault members (mq_timeout, ...) are read with the lmcache.mp. prefix.
    keys = set(lmcache.releases_with("mp_keys", "lmcache.mp.lazy_offload_horizon_steps"))
    assert "0.5.6" in keys
    assert "0.5.6" in lmcache.releases_with("mp_keys", "lmcache.mp.mq_timeout")
    assert not any(k.endswith(("_", ".")) for r in lmcache.releases() for k in r.mp_keys)


@pytest.mark.network
@pytest.mark.timeout(300)
def test_a_table_re_derives_from_its_wheel() -> None:
    cache = REPO_ROOT / ".cache" / "lmcache"
    newest = lmcache.releases()[-1]
    if not (cache / newest.wheel.filename).is_file() and not pypi_reachable():
        pytest.skip("the lmcache wheel is not cached and pypi.org:443 is unreachable")
    proc = subprocess.run(
        [sys.executable, str(GENERATOR), "--check", "--versions", newest.version],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
