"""The report's JSON encoder writes exactly what ``json.dumps(value, indent=2)`` writes."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from kvtool.output.jsontext import dumps_indented

_VALUES: list[Any] = [
    {},
    [],
    (),
    "",
    0,
    None,
    {"a": [], "b": {}, "c": [[]], "d": [{}]},
    [1.5, 1e16, 1e-7, -0.0, math.nan, math.inf, -math.inf, 10**30, True, False, None],
    ["naïve", "\u2028", 'quote " and \\ backslash', "\x00\x1f", "snowman \u2603 \U0001f600"],
    {7: "int key", 2.5: "float key", None: "none key", math.inf: "inf key", math.nan: "nan"},
    {True: "bool key", False: "another"},
    {"nested": {"deeper": [1, {"deepest": ("tuple", "items")}]}},
    {"skipped": [{"file": "a.yaml", "reason": "no vLLM server", "problem": False}] * 3},
]


@pytest.mark.parametrize("value", _VALUES, ids=range(len(_VALUES)))
def test_the_same_text_as_json_dumps_indent_2(value: Any) -> None:
    assert dumps_indented(value) == json.dumps(value, indent=2)


def test_what_json_refuses_raises_json_s_error() -> None:
    circular: list[Any] = []
    circular.append(circular)
    with pytest.raises(ValueError, match="Circular reference"):
        dumps_indented(circular)
    with pytest.raises(TypeError, match="not JSON serializable"):
        dumps_indented({"a": object()})
    with pytest.raises(TypeError, match="keys must be"):
        dumps_indented({(1, 2): "tuple key"})
