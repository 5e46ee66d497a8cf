"""scripts/gpu_check.sh and its pipeline check, on CPU: the refusal, the dry run, and that
the dry run's byte check can fail."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch

from kvtool.connector.transfer import LoadWait, TransferEngine

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "gpu_check.sh"
PIPELINE = REPO / "scripts" / "bench" / "gpu_pipeline.py"


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHON": sys.executable, **extra}


def _pipeline() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_pipeline", PIPELINE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_without_cuda_it_refuses_with_exit_2_and_one_line() -> None:
    proc = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True,
                          timeout=120, env=_env())
    assert proc.returncode == 2
    assert proc.stdout == "" and len(proc.stderr.strip().splitlines()) == 1
    assert "no CUDA device" in proc.stderr


def test_the_dry_run_verifies_every_layout_on_cpu() -> None:
    proc = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True,
                          timeout=180, env=_env(GPU_CHECK_DRY_RUN="1"))
    assert proc.returncode == 0, proc.stderr
    for layout in ("LBHNC", "LBNHC", "BLHNC", "BLNHC"):
        line = next(x for x in proc.stdout.splitlines() if x.startswith(f"{layout}: "))
        assert "'mismatched_elements': 0" in line and "'async_loads_checked': 0" not in line
    for wait in ("per_layer", "whole"):
        line = next(x for x in proc.stdout.splitlines()
                    if x.startswith(f"layered load ({wait} wait): "))
        assert "mismatched elements 0, failed jobs 0" in line
    for layout in ("LBHNC", "LBNHC", "BLHNC", "BLNHC"):
        line = next(x for x in proc.stdout.splitlines()
                    if x.startswith(f"hit vs recompute ({layout}): "))
        assert "failed jobs 0" in line and "synchronous per-layer load adds" in line
    assert proc.stdout.rstrip().endswith("problems: none")


def test_the_byte_check_catches_a_load_into_the_wrong_block(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pipeline = _pipeline()
    original = TransferEngine.submit_load

    def shifted(self: TransferEngine, job: Any, **kwargs: Any) -> None:
        original(self, job._replace(block_ids=tuple(b + 1 for b in job.block_ids)), **kwargs)

    monkeypatch.setattr(TransferEngine, "submit_load", shifted)
    result = pipeline.run_pipeline(pipeline.DRY_RUN_SHAPE, pipeline.LAYOUTS["LBNHC"],
                                   torch.device("cpu"), steps=3, per_step=4)
    assert result["mismatched_elements"] > 0


def _shift_loads_waiting(monkeypatch: pytest.MonkeyPatch, shifted: LoadWait) -> None:
    """Loads submitted with ``wait=shifted`` land one block off: a bug the byte check
    must see (loads waited for otherwise are untouched)."""
    original = TransferEngine.submit_load

    def submit_load(self: TransferEngine, job: Any, *, wait: LoadWait = LoadWait.WHOLE) -> None:
        if wait is shifted:
            job = job._replace(block_ids=tuple(b + 1 for b in job.block_ids))
        original(self, job, wait=wait)

    monkeypatch.setattr(TransferEngine, "submit_load", submit_load)


def test_the_byte_check_covers_asynchronous_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    pipeline = _pipeline()
    _shift_loads_waiting(monkeypatch, LoadWait.NONE)
    result = pipeline.run_pipeline(pipeline.DRY_RUN_SHAPE, pipeline.LAYOUTS["LBHNC"],
                                   torch.device("cpu"), steps=3, per_step=4)
    assert result["async_loads_checked"] > 0 and result["mismatched_elements"] > 0


def test_the_byte_check_covers_the_load_read_layer_by_layer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pipeline = _pipeline()
    _shift_loads_waiting(monkeypatch, LoadWait.PER_LAYER)
    result = pipeline.layered_load(pipeline.DRY_RUN_SHAPE, torch.device("cpu"), blocks=4,
                                   repeats=1)
    assert result["per_layer"]["mismatched_elements"] > 0
    assert result["whole"]["mismatched_elements"] == 0
