"""VG005 on flags whose choices vLLM builds from a registry (``--quantization``).

Releases 0.4.1-0.8.5 write ``choices=[*QUANTIZATION_METHODS, None]``
(https://github.com/vllm-project/vllm/blob/v0.6.0/vllm/engine/arg_utils.py); the tables
once carried an unresolved placeholder there and refused every method. The releases
checked are the ones whose generated table lists ``fp8`` for the flag, read from the
tables, so the test follows whatever the generator derives.
"""

from __future__ import annotations

import pytest

from kvtool.releases import load_release
from kvtool.releases.loader import available_versions
from tests.audit.rulekit import codes, config, only, opt, run


def _releases_accepting(flag: str, value: str) -> list[str]:
    found = []
    for version in available_versions():
        fact = next((f for f in load_release(version).flags if f.name == flag), None)
        if fact is not None and fact.choices is not None and value in fact.choices:
            found.append(version)
    return found


_FP8 = _releases_accepting("--quantization", "fp8")


def test_the_tables_list_fp8_before_0_9_as_well() -> None:
    # fp8 is in QUANTIZATION_METHODS from 0.4.1 on; the old tables must carry it too.
    assert any(v.startswith("0.6.") for v in _FP8) and any(v.startswith("0.8.") for v in _FP8)


@pytest.mark.parametrize("version", _FP8)
def test_quantization_fp8_draws_no_vg005(version: str) -> None:
    assert "VG005" not in codes(run(config(version, opt("--quantization", "fp8"))))


@pytest.mark.parametrize("version", [_FP8[0], _FP8[len(_FP8) // 2], _FP8[-1]])
def test_a_method_the_release_lacks_still_draws_vg005(version: str) -> None:
    finding = only(run(config(version, opt("--quantization", "fp9"))), "VG005")
    assert "`fp8`" in finding.message
