"""JSON text indented by two spaces, as ``json.dumps(value, indent=2)`` writes it, faster.

With ``indent`` set, the standard library encodes in pure Python through nested
generators; an audit of a large tree spends more time there than in its rules. This
encoder writes the same bytes (ASCII escapes, ``NaN``/``Infinity``, bool/None/number
keys) by appending to one list; whatever it does not handle (an object of another type,
a circular reference) is left to ``json.dumps``, which raises its own error.
"""

from __future__ import annotations

import json
from json.encoder import encode_basestring_ascii
from typing import Any

_INDENT = "  "


class _Unsupported(Exception):
    """A value this encoder leaves to ``json.dumps``."""


def dumps_indented(value: Any) -> str:
    """``json.dumps(value, indent=2)``."""
    parts: list[str] = []
    try:
        _encode(value, parts, "\n", 0)
    except (_Unsupported, RecursionError):
        return json.dumps(value, indent=2)
    return "".join(parts)


def _float(value: float) -> str:
    if value != value:
        return "NaN"
    if value == float("inf"):
        return "Infinity"
    if value == float("-inf"):
        return "-Infinity"
    return float.__repr__(value)


def _scalar(value: Any) -> str | None:
    """The text of a scalar, in ``json``'s order of tests; None for a container."""
    if isinstance(value, str):
        return encode_basestring_ascii(value)
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return int.__repr__(value)
    if isinstance(value, float):
        return _float(value)
    return None


def _key(key: Any) -> str:
    if isinstance(key, str):
        return encode_basestring_ascii(key)
    if isinstance(key, float):
        return encode_basestring_ascii(_float(key))
    if key is True:
        return '"true"'
    if key is False:
        return '"false"'
    if key is None:
        return '"null"'
    if isinstance(key, int):
        return encode_basestring_ascii(int.__repr__(key))
    raise _Unsupported


def _encode(value: Any, parts: list[str], newline: str, depth: int) -> None:
    if depth > 1000:  # json.dumps's own recursion guard names a circular reference
        raise _Unsupported
    text = _scalar(value)
    if text is not None:
        parts.append(text)
        return
    inner = newline + _INDENT
    following = "," + inner
    if isinstance(value, (list, tuple)):
        if not value:
            parts.append("[]")
            return
        separator = "[" + inner
        for item in value:
            text = encode_basestring_ascii(item) if type(item) is str else _scalar(item)
            if text is not None:
                parts.append(separator + text)
            else:
                parts.append(separator)
                _encode(item, parts, inner, depth + 1)
            separator = following
        parts.append(newline + "]")
        return
    if isinstance(value, dict):
        if not value:
            parts.append("{}")
            return
        separator = "{" + inner
        for key, item in value.items():
            name = encode_basestring_ascii(key) if type(key) is str else _key(key)
            text = encode_basestring_ascii(item) if type(item) is str else _scalar(item)
            if text is not None:
                parts.append(f"{separator}{name}: {text}")
            else:
                parts.append(f"{separator}{name}: ")
                _encode(item, parts, inner, depth + 1)
            separator = following
        parts.append(newline + "}")
        return
    raise _Unsupported
