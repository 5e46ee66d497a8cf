"""Bound the nesting of JSON and TOML before a parser recurses into it.

Python's ``json`` and ``tomllib`` read nested arrays and tables by recursion, so a
100,000-deep ``[[[...`` fails deep inside the parser with whatever error the
interpreter's stack gives. The text is measured first instead, in one linear pass:
strings (and TOML comments) are removed, the brackets left are counted, and a depth
over the ``nesting_depth`` limit of :mod:`kvtool.limits` is refused with
``LimitExceeded`` before any parser sees it. A TOML file can also nest through dotted
keys and table headers (``a.b.c = 1``), which have no brackets, so the parsed tables
are measured too, without recursion.
"""

from __future__ import annotations

import contextlib
import json
import re
import tomllib
from collections.abc import Iterator
from itertools import accumulate
from typing import Any

from kvtool import limits

_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
# Multi-line strings first, so '"""' is not read as an empty string and a quote.
_TOML_SKIPPED = re.compile(
    r'"""(?:[^\\]|\\.)*?"""'
    r"|'''.*?'''"
    r'|"[^"\\\n]*(?:\\.[^"\\\n]*)*"'
    r"|'[^'\n]*'"
    r"|#[^\n]*",
    re.DOTALL,
)
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}
_NOT_BRACKETS = re.compile(r"[^\[\]{}]+")


def bracket_depth(text: str) -> int:
    """The deepest nesting of ``[]``/``{}`` in ``text`` (strings already removed)."""
    brackets = _NOT_BRACKETS.sub("", text)
    return max(accumulate(map(_STEP.__getitem__, brackets)), default=0)


def json_depth(text: str | bytes) -> int:
    """How deep the arrays and objects of the JSON ``text`` nest (0 for a scalar)."""
    if isinstance(text, bytes):  # decoded as json.loads will: UTF-8, -16 or -32
        text = text.decode(json.detect_encoding(text), errors="replace")
    return bracket_depth(_JSON_STRING.sub("", text))


def check_json(text: str | bytes, where: str) -> None:
    """Raise ``LimitExceeded`` when the JSON ``text`` nests deeper than the limit."""
    limit = limits.NESTING_DEPTH
    if isinstance(text, bytes):
        openings = text.count(b"[") + text.count(b"{")
    else:
        openings = text.count("[") + text.count("{")
    if openings <= limit.value:
        return  # too few brackets to be too deep: the common case, counted in C
    if json_depth(text) > limit.value:
        raise limits.LimitExceeded(limit.message(where))


def loads_json(text: str | bytes, where: str) -> Any:
    """``json.loads(text)`` once ``text`` is known to nest within the limit; an integer
    past the ``int_digits`` limit is ``LimitExceeded`` too. Malformed JSON is json's own
    ``ValueError`` (``JSONDecodeError``), for the caller to word."""
    check_json(text, where)
    with _int_digits_named(where):
        return json.loads(text)


@contextlib.contextmanager
def _int_digits_named(where: str) -> Iterator[None]:
    """Python's digit guard (set to ``int_digits`` at CLI start) as kvtool's own error."""
    try:
        yield
    except ValueError as error:
        if "integer string conversion" not in str(error):
            raise
        raise limits.LimitExceeded(limits.INT_DIGITS.message(where)) from None


def check_tree(value: object, where: str) -> None:
    """Raise ``LimitExceeded`` when parsed lists and dicts nest deeper than the limit."""
    max_depth = limits.NESTING_DEPTH.value
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if not isinstance(node, (dict, list)):
            continue
        if depth > max_depth:
            raise limits.LimitExceeded(limits.NESTING_DEPTH.message(where))
        children = node.values() if isinstance(node, dict) else node
        stack.extend((child, depth + 1) for child in children)


def loads_toml(text: str, where: str) -> dict[str, Any]:
    """``tomllib.loads(text)``, refused when its brackets or its tables nest too deeply."""
    limit = limits.NESTING_DEPTH
    if text.count("[") + text.count("{") > limit.value and (
        bracket_depth(_TOML_SKIPPED.sub("", text)) > limit.value
    ):
        raise limits.LimitExceeded(limit.message(where))
    with _int_digits_named(where):
        data = tomllib.loads(text)
    check_tree(data, where)
    return data
