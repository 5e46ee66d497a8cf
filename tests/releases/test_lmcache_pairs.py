"""rules/lmcache/vllm_pairs.json: vLLM x LMCache pairs whose connector cannot start,
generated from both projects' wheels by scripts/gen_lmcache_pairs.py.

The generator's logic is tested on wheels written here (the shapes follow vLLM 0.20.0's
lmcache_mp_connector.py, which builds ``ParallelStrategy`` with seven positional arguments
and ``LMCacheMPSchedulerAdapter(server_url=...)``, and LMCache's
vllm_multi_process_adapter.py, whose dataclass lost two fields; LMCache#4134).
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import zipfile
from functools import cache
from pathlib import Path
from types import ModuleType

import pytest

from kvtool import lmcache
from tests.conftest import REPO_ROOT
from tests.releases.wheelcache import pypi_reachable

ADAPTER = "lmcache/integration/vllm/vllm_multi_process_adapter.py"
VLLM_MP = "vllm/distributed/kv_transfer/kv_connector/v1/lmcache_mp_connector.py"


@cache
def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "gen_lmcache_pairs", REPO_ROOT / "scripts" / "gen_lmcache_pairs.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def wheel(path: Path, files: dict[str, str]) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return path


VLLM_SOURCE = """\
from lmcache.integration.vllm.utils import mla_enabled
try:
    from lmcache.integration.vllm.vllm_multi_process_adapter import (
        LMCacheMPSchedulerAdapter,
        ParallelStrategy,
    )
except ImportError:
    from vllm.distributed.kv_transfer.kv_connector.v1.lmcache_integration import (
        LMCacheMPSchedulerAdapter,
        ParallelStrategy,
    )


def create_scheduler_adapter(server_url, config):
    strategy = ParallelStrategy(mla_enabled(config), 1, 0, 1, 0, 1, 1)
    return LMCacheMPSchedulerAdapter(server_url=server_url, parallel_strategy=strategy)
"""


def lmcache_source(fields: list[str], url_param: str) -> str:
    body = "\n".join(f"    {name}: int" for name in fields)
    return (
        "from dataclasses import dataclass\n\n\n@dataclass\nclass ParallelStrategy:\n"
        f"{body}\n\n\nclass LMCacheMPSchedulerAdapter:\n"
        f"    def __init__(self, {url_param}, parallel_strategy, mq_timeout=1.0):\n"
        "        pass\n"
    )


def packages(tmp_path: Path, fields: list[str], url_param: str) -> tuple[object, object]:
    gen = generator()
    vllm = wheel(tmp_path / "vllm.whl", {VLLM_MP: VLLM_SOURCE, "vllm/__init__.py": ""})
    lmc = wheel(
        tmp_path / "lmcache.whl",
        {
            "lmcache/__init__.py": "",
            "lmcache/integration/vllm/utils.py": "def mla_enabled(config):\n    return False\n",
            ADAPTER: lmcache_source(fields, url_param),
        },
    )
    return gen.Package("vllm", "0.20.0", vllm), gen.Package("lmcache", "9.9.9", lmc)


SEVEN = ["use_mla", "kv_world_size", "kv_worker_id", "world", "worker", "tp", "pp"]


def test_a_call_with_more_positional_arguments_than_fields_is_a_type_error(
    tmp_path: Path,
) -> None:
    vllm, lmc = packages(tmp_path, SEVEN[:1] + SEVEN[3:], "server_url")  # five fields
    problem = generator().mp_problem(vllm, lmc)
    assert problem is not None
    assert problem.reason.startswith("TypeError: ParallelStrategy() takes 5 arguments")
    assert problem.where == f"{VLLM_MP}:15"


def test_an_unknown_keyword_is_a_type_error(tmp_path: Path) -> None:
    vllm, lmc = packages(tmp_path, SEVEN, "server_urls")
    problem = generator().mp_problem(vllm, lmc)
    assert problem is not None and "unexpected keyword argument 'server_url'" in problem.reason


def test_a_fitting_pair_and_a_fallback_to_vllms_copies_are_quiet(tmp_path: Path) -> None:
    vllm, lmc = packages(tmp_path, SEVEN, "server_url")
    assert generator().mp_problem(vllm, lmc) is None
    # LMCache without the adapter module: vLLM's except branch imports its own copies.
    gen = generator()
    bare = wheel(
        tmp_path / "bare.whl",
        {
            "lmcache/__init__.py": "",
            "lmcache/integration/vllm/utils.py": "def mla_enabled(config):\n    return False\n",
        },
    )
    assert gen.mp_problem(vllm, gen.Package("lmcache", "0.0.1", bare)) is None


def test_a_missing_unguarded_import_is_an_import_error(tmp_path: Path) -> None:
    gen = generator()
    vllm, _ = packages(tmp_path, SEVEN, "server_url")
    old = wheel(
        tmp_path / "old.whl", {"lmcache/__init__.py": "", "lmcache/integration/vllm/utils.py": ""}
    )
    problem = gen.mp_problem(vllm, gen.Package("lmcache", "0.0.1", old))
    assert problem is not None and "no `mla_enabled`" in problem.reason


def test_the_table_records_the_same_wheels_as_the_release_and_lmcache_tables() -> None:
    table = lmcache.vllm_pairs()
    for version, recorded in table.vllm_wheels.items():
        release = json.loads((REPO_ROOT / "rules" / "releases" / f"{version}.json").read_text())
        assert (recorded.filename, recorded.sha256) == (
            release["wheel"]["filename"],
            release["wheel"]["sha256"],
        )
    by_version = {r.version: r.wheel for r in lmcache.releases()}
    assert set(table.lmcache_wheels) == set(by_version)
    for version, recorded in table.lmcache_wheels.items():
        assert recorded.sha256 == by_version[version].sha256
    assert all(
        row.vllm in table.vllm_wheels and row.lmcache in table.lmcache_wheels for row in table.pairs
    )


def test_lmcache_4134_drift_is_in_the_table() -> None:
    # LMCache#4134: vLLM 0.19/0.20's bundled MP connector passes server_url= and seven
    # ParallelStrategy arguments; newer LMCache takes server_urls and six fields.
    reasons = {
        row.lmcache: row.reason
        for row in lmcache.vllm_pairs().pairs
        if row.vllm == "0.20.0" and row.connector == "LMCacheMPConnector"
    }
    assert "takes 6 arguments, vLLM passes 7" in reasons["0.5.0"]
    assert "'server_url'" in reasons["0.5.6"]


def test_vllm_42911_pair_is_the_parallel_strategy_signature() -> None:
    # vllm-project/vllm#42911 (2026-06-15 comment) runs vllm 0.21.0+cu129 with lmcache 0.4.7
    # and LMCacheMPConnector. The wheels say that pair cannot start: vLLM 0.21.0 does not try
    # LMCache's own connector and builds ParallelStrategy with seven arguments; LMCache
    # 0.4.7's dataclass has five fields (use_mla, vllm_world_size, vllm_worker_id, tp_size,
    # pp_size).
    row = next(
        r
        for r in lmcache.vllm_pairs().pairs
        if (r.vllm, r.lmcache, r.connector) == ("0.21.0", "0.4.7", "LMCacheMPConnector")
    )
    assert row.reason.startswith("TypeError: ParallelStrategy() takes 5 arguments, vLLM passes 7")


@pytest.mark.network
@pytest.mark.timeout(600)
def test_the_table_re_derives_from_the_wheels_for_one_release() -> None:
    cached = (REPO_ROOT / ".cache" / "lmcache").is_dir() and (
        REPO_ROOT / ".cache" / "wheels"
    ).is_dir()
    if not cached and not pypi_reachable():
        pytest.skip("the wheels are not cached and pypi.org:443 is unreachable")
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO_ROOT / "scripts" / "gen_lmcache_pairs.py"),
            "--check",
            "--versions",
            "0.21.0",
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
