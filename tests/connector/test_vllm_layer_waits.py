"""KvtoolConnector's synchronous loads per layer, through its vLLM hooks (vllm_layer_waits.py).

With a forward that calls ``wait_for_layer_load`` (piecewise CUDA graphs or
eager), nothing waits up front and each layer's read sees exactly the layers
up to it; with a full CUDA graph, or no attention metadata in the forward
context, or before every registered layer has asked once, or when one never
does, the whole load is waited for before the forward; the first hook after
the forward covers layers the forward never asked about. The streams
are a lazy stand-in (no CUDA here; see lazy_streams.py): copies run only
when a wait forces them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.vllm_env import run_json_script, vllm_python

pytestmark = pytest.mark.vllm

SCRIPT = Path(__file__).with_name("vllm_layer_waits.py")
NUM_LAYERS = 12


@pytest.fixture(scope="module")
def cases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return run_json_script(vllm_python(), SCRIPT, tmp_path_factory.mktemp("layer-waits"))


@pytest.mark.parametrize("case", ["piecewise", "eager"])
def test_a_forward_that_asks_per_layer_reads_each_layer_once_it_alone_is_loaded(
    cases: dict[str, Any], case: str
) -> None:
    figures = cases[case]
    assert figures["loaded_before_any_hook"] == [False] * NUM_LAYERS  # nothing waited up front
    assert figures["each_read_saw_its_layer"]
    assert figures["reads_exactly_up_to_the_layer"]  # in model order, no layer early


@pytest.mark.parametrize("case", ["full_graph", "no_attention_metadata",
                                  "before_every_layer_asked", "a_registered_layer_never_asks"])
def test_a_forward_that_will_not_ask_waits_for_the_whole_load_up_front(
    cases: dict[str, Any], case: str
) -> None:
    assert cases[case]["loaded_before_any_hook"] == [True] * NUM_LAYERS


@pytest.mark.parametrize("hook", ["get_finished", "finish_forward", "wait_for_save"])
def test_the_first_hook_after_the_forward_waits_for_layers_never_asked_about(
    cases: dict[str, Any], hook: str
) -> None:
    figures = cases[f"first_layer_only_then_{hook}"]
    assert figures["loaded_before_any_hook"] == [False] * NUM_LAYERS
    assert figures["loaded_after"] == [True] * NUM_LAYERS


def test_loads_copy_the_layers_in_the_order_the_forward_first_read_them(
    cases: dict[str, Any]
) -> None:
    # Registered 0..11, read 11..0: without reordering, layer 11's wait would run
    # every other layer's copies first.
    figures = cases["read_in_another_order"]
    assert figures["loaded_before_any_hook"] == [False] * NUM_LAYERS
    assert figures["reads_exactly_up_to_the_layer"]
