"""Every vLLM 0.32 KV cache layout with several KV heads, views built by vLLM (vllm_layouts.py).

The transfer engine must round-trip every byte in each layout where vLLM says
a page is one run of bytes (``KVCacheLayout.is_block_compact``), and refuse
the others at registration with an error naming the layouts it takes.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.vllm_env import vllm_python, vllm_subprocess_env

pytestmark = pytest.mark.vllm

SCRIPT = Path(__file__).with_name("vllm_layouts.py")


@pytest.fixture(scope="module")
def layouts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    proc = subprocess.run(
        [str(vllm_python()), str(SCRIPT)], capture_output=True, text=True, timeout=600,
        env=vllm_subprocess_env(tmp_path_factory.mktemp("layouts")),
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    result: dict[str, Any] = json.loads(proc.stdout.splitlines()[-1])
    return result


def test_every_block_compact_layout_round_trips_and_the_others_are_refused(
    layouts: dict[str, Any],
) -> None:
    assert len(layouts) >= 6  # vLLM 0.32 has six
    for name, outcome in layouts.items():
        if outcome["block_compact"]:
            assert outcome["ok"], (name, outcome["error"])
        else:
            assert not outcome["ok"] and "not one dense run of bytes" in outcome["error"], name
    assert layouts["LBHNC"]["ok"]  # what the connector asks vLLM for
