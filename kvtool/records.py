"""Read msgspec's validation errors as (where, what) for kvtool's one-line error messages.

msgspec reports ``Expected `int`, got `str` - at `$.audit.fail-on``` or
``Object contains unknown field `ignor```; kvtool's errors name the key the user wrote.
"""

from __future__ import annotations

import re

import msgspec

_AT_PATH = re.compile(r"^(?P<what>.*) - at `\$(?P<path>[^`]*)`$", re.S)
_UNKNOWN_FIELD = re.compile(r"^Object contains unknown field `(?P<key>[^`]*)`$")


def problem_of(exc: msgspec.ValidationError) -> tuple[str, str]:
    """``(key path, message)``: the path as dotted keys ("" for the top level)."""
    text = str(exc)
    at = _AT_PATH.match(text)
    where, what = (at["path"].lstrip("."), at["what"]) if at else ("", text)
    unknown = _UNKNOWN_FIELD.match(what)
    if unknown:
        key = unknown["key"]
        return (f"{where}.{key}" if where else key), "unknown key"
    return where, what
