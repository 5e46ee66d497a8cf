"""Every vLLM 0.32 KV cache layout with several KV heads, views built by vLLM (vllm_layouts.py).

The transfer engine must round-trip every byte in each layout where vLLM says
a page is one run of bytes (``KVCacheLayout.is_block_compact``), and refuse
the others at registration with an error naming the layouts it takes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.vllm_env import run_json_script, vllm_python

pytestmark = pytest.mark.vllm

SCRIPT = Path(__file__).with_name("vllm_layouts.py")


@pytest.fixture(scope="module")
def layouts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return run_json_script(vllm_python(), SCRIPT, tmp_path_factory.mktemp("layouts"))


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
