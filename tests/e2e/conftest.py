"""Fixtures for the end-to-end tests: the vLLM environment and the tiny model."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.vllm_env import REPO_ROOT, vllm_python, vllm_subprocess_env


@pytest.fixture(scope="session")
def vllm_py() -> Path:
    """The vLLM environment's python (the test is skipped when it is missing)."""
    return vllm_python()


@pytest.fixture(scope="session")
def vllm_scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """vLLM's model-info cache for this session, out of the user's home."""
    return tmp_path_factory.mktemp("vllm-scratch")


@pytest.fixture(scope="session")
def tiny_model(vllm_py: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The offline tiny Llama of scripts/build_tiny_model.py, built once per session."""
    out = tmp_path_factory.mktemp("tiny-model")
    subprocess.run(
        [str(vllm_py), str(REPO_ROOT / "scripts" / "build_tiny_model.py"), str(out)],
        check=True, capture_output=True, text=True, timeout=300, env=vllm_subprocess_env(),
    )
    return out
