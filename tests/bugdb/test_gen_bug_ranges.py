"""scripts/gen_bug_ranges.py --check against the real wheels: the committed proofs hold,
and a proof file that no longer matches what the wheels say is reported (exit 1).

Reads the prover's wheel cache (~/.cache/kvtool/wheels or $KVTOOL_WHEEL_CACHE) and
downloads what is missing; skipped when neither is possible.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tests.releases.wheelcache import pypi_reachable

sys.path.insert(0, str(REPO_ROOT / "scripts"))

import gen_bug_ranges
from releasegen.prover import Prover

from kvtool.bugdb import proofs


def _all_cached() -> bool:
    prover = Prover()
    from releasegen import wheels

    for proof in proofs().values():
        for check in proof.checks:
            distribution = None if proof.package == "vllm" else proof.package
            if wheels.cached_wheel(prover.cache_dir, check.release, distribution) is None:
                return False
    return True


@pytest.fixture
def wheels_available() -> None:
    if not _all_cached() and not pypi_reachable():
        pytest.skip("boundary wheels are not cached and pypi.org:443 is unreachable")


@pytest.mark.network
@pytest.mark.timeout(1800)
@pytest.mark.usefixtures("wheels_available")
def test_committed_proofs_hold(capsys: pytest.CaptureFixture[str]) -> None:
    assert gen_bug_ranges.main(["--check"]) == 0
    assert "proved" in capsys.readouterr().err


@pytest.mark.network
@pytest.mark.timeout(1800)
@pytest.mark.usefixtures("wheels_available")
def test_a_drifted_proof_fails_the_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    shutil.copy(REPO_ROOT / "rules" / "bugs" / "proofs.json", tmp_path / "proofs.json")
    data = json.loads((tmp_path / "proofs.json").read_text())
    record = next(iter(data["records"].values()))
    record["checks"][0]["sha256"] = "0" * 64  # a wheel the generator did not read
    (tmp_path / "proofs.json").write_text(json.dumps(data))
    monkeypatch.setattr(gen_bug_ranges, "bugs_dir", lambda: tmp_path)
    assert gen_bug_ranges.main(["--check"]) == 1
    assert "out of date" in capsys.readouterr().err
