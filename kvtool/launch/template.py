"""Fill a recipe's ``${name}`` placeholders from the launch parameters.

A string that is exactly one placeholder takes the parameter's value with its type
(an int stays an int inside kv-transfer-config JSON); any other string substitutes
the text form. Nested lists and dicts are filled recursively.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from kvtool.errors import KvtoolError

PLACEHOLDER = re.compile(r"\$\{([a-z_][a-z0-9_]*)\}")


def as_text(value: Any) -> str:
    """The spelling a parameter gets inside argv: integral floats lose their ``.0``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def fill(value: Any, params: Mapping[str, Any], where: str) -> Any:
    """``value`` with every placeholder replaced; an unknown name is a KvtoolError."""
    if isinstance(value, str):
        return _fill_text(value, params, where)
    if isinstance(value, list | tuple):
        return [fill(item, params, where) for item in value]
    if isinstance(value, dict):
        return {key: fill(item, params, where) for key, item in value.items()}
    return value


def _lookup(name: str, params: Mapping[str, Any], where: str) -> Any:
    if name not in params or params[name] is None:
        raise KvtoolError(f"{where}: parameter ${{{name}}} has no value for this launch")
    return params[name]


def _fill_text(text: str, params: Mapping[str, Any], where: str) -> Any:
    whole = PLACEHOLDER.fullmatch(text)
    if whole:
        return _lookup(whole.group(1), params, where)
    return PLACEHOLDER.sub(lambda m: as_text(_lookup(m.group(1), params, where)), text)
