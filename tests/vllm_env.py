"""Locate the suite's vLLM environment (``.venv-vllm``) for tests that run code inside it.

The main test environment has no vLLM; tests that need it run a script with the python
of ``.venv-vllm`` (built by ``scripts/setup_vllm_env.sh``) in a subprocess. The python
is taken from ``$KVTOOL_VLLM_PYTHON`` when set, else ``<repo>/.venv-vllm/bin/python``;
either way the subprocess imports this checkout's kvtool (it leads ``PYTHONPATH``), so
a venv holding only vLLM and what it imports will do, e.g. one with another vLLM
release for ``tests/connector/test_scheduler_harness.py``.

Use::

    from tests.vllm_env import vllm_python   # or: import vllm_env (importlib mode)

    def test_x():
        py = vllm_python()          # skips the test with a clear reason when absent
        subprocess.run([str(py), "script.py"], env=vllm_subprocess_env(tmp_path), ...)
"""

from __future__ import annotations

import os
import subprocess
from functools import lru_cache
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
ENV_VAR = "KVTOOL_VLLM_PYTHON"
DEFAULT_PYTHON = REPO_ROOT / ".venv-vllm" / "bin" / "python"


def vllm_python_path() -> Path:
    """The python that should have vLLM: ``$KVTOOL_VLLM_PYTHON`` or the repo default."""
    configured = os.environ.get(ENV_VAR)
    return Path(configured) if configured else DEFAULT_PYTHON


@lru_cache(maxsize=1)
def _probe(python: Path) -> str | None:
    """None when ``python`` imports vllm and kvtool, else the reason it cannot be used."""
    if not python.exists():
        return (
            f"vLLM environment not found at {python} "
            f"(run scripts/setup_vllm_env.sh or set {ENV_VAR})"
        )
    probe = subprocess.run(
        [str(python), "-c", "import vllm, kvtool"],
        capture_output=True,
        text=True,
        timeout=120,
        env=vllm_subprocess_env(),
    )
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["no output"])[-1]
        return f"{python} cannot import vllm and kvtool: {last}"
    return None


def vllm_python() -> Path:
    """The vLLM environment's python; skips the calling test when it is missing or broken."""
    python = vllm_python_path()
    reason = _probe(python)
    if reason is not None:
        pytest.skip(reason)
    return python


def vllm_subprocess_env(scratch: Path | None = None) -> dict[str, str]:
    """Environment for a vLLM subprocess: offline, no telemetry, 1 GiB CPU KV cache.

    ``scratch`` (if given) holds vLLM's model-info cache instead of the user's home.
    Callers may override any key (e.g. drop ``VLLM_CPU_KVCACHE_SPACE`` to size the
    pool with ``kv_cache_memory_bytes``).
    """
    env = dict(os.environ)
    env.update(
        {
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
            "VLLM_CPU_KVCACHE_SPACE": "1",
            "TOKENIZERS_PARALLELISM": "false",
        }
    )
    # This checkout's kvtool first: an interpreter from KVTOOL_VLLM_PYTHON may not have
    # kvtool installed, and .venv-vllm's editable install may point at another checkout.
    env["PYTHONPATH"] = os.pathsep.join(
        [str(REPO_ROOT), *(p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p)]
    )
    if scratch is not None:
        env["VLLM_CACHE_ROOT"] = str(scratch / "vllm-cache")
    return env
