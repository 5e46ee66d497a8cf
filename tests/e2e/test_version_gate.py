"""The adapter refuses vLLM releases it was not written for, naming the supported ones.

Runs in the main test environment: a stand-in ``vllm`` package that only
carries a version is enough, because the check runs before any other vLLM import.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kvtool.connector.series import SUPPORTED_SERIES, supported_text

_FIRST, _LAST = min(SUPPORTED_SERIES), max(SUPPORTED_SERIES)
BEFORE_FIRST = f"{_FIRST[0]}.{_FIRST[1] - 1}.2"
AFTER_LAST = f"{_LAST[0]}.{_LAST[1] + 1}.0"


def import_adapter_under(version: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    fake = tmp_path / "vllm"
    fake.mkdir()
    (fake / "__init__.py").write_text(f"__version__ = {version!r}\n")
    return subprocess.run(
        [sys.executable, "-c", "import kvtool.connector.vllm"],
        capture_output=True, text=True, timeout=60, env={"PYTHONPATH": str(tmp_path)},
    )


@pytest.mark.parametrize("version", [BEFORE_FIRST, AFTER_LAST, "1.0.0", "not-a-version"])
def test_unsupported_vllm_release_is_refused_with_the_supported_ones_named(
    version: str, tmp_path: Path
) -> None:
    proc = import_adapter_under(version, tmp_path)
    assert proc.returncode != 0
    last_line = proc.stderr.strip().splitlines()[-1]
    assert "UnsupportedVllmError" in last_line
    assert f"this is vLLM {version}" in last_line
    assert supported_text() in last_line
    assert all(f"{major}.{minor}.x" in last_line for major, minor in SUPPORTED_SERIES)


@pytest.mark.parametrize("series", SUPPORTED_SERIES, ids=lambda s: f"{s[0]}.{s[1]}")
def test_a_supported_release_passes_the_gate(series: tuple[int, int], tmp_path: Path) -> None:
    # Past the gate the adapter imports vLLM's connector API, which the stand-in lacks.
    proc = import_adapter_under(f"{series[0]}.{series[1]}.1", tmp_path)
    assert "UnsupportedVllmError" not in proc.stderr
    assert "No module named 'vllm.distributed'" in proc.stderr
