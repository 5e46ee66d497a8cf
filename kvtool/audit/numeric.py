"""Whether vLLM's argparse type parsers accept a numeric flag value (pure; no vLLM import).

Mirrors the parsers a release table names for each numeric flag (``FlagFact.value_type``):
``int`` and ``float`` are Python's own; ``human_readable_int`` takes a number with one
unit suffix ("32k" decimal, "32K" binary, decimals only with decimal units) or a plain
int; ``human_readable_int_or_auto`` also takes "auto" and -1; an optional flag also
takes "None" and "". Which suffixes multiply is per release
(``ReleaseFacts.human_int_suffixes``): a suffix the pattern admits but the release does
not multiply by falls through to ``int`` and fails, as in vLLM.
"""

from __future__ import annotations

import re
from collections.abc import Collection

from kvtool.releases.model import NumericParser

# The pattern vLLM's human_readable_int matches before it looks a suffix up.
_HUMAN = re.compile(r"(\d+(?:\.\d+)?)([kKmMgGtT])")


def rejection(
    text: str, parser: NumericParser, *, accepts_none: bool, suffixes: Collection[str]
) -> str | None:
    """Why ``parser`` rejects ``text`` (an argv word), or None when it parses."""
    if accepts_none and text in ("", "None"):
        return None
    if parser == "float":
        return None if _parses(float, text) else "expected a number"
    if parser == "int":
        return None if _parses(int, text) else "expected an integer"
    if parser == "human_readable_int_or_auto" and (
        text.strip() == "-1" or text.strip().lower() == "auto"
    ):
        return None
    return _human_int_rejection(text.strip(), suffixes)


def _human_int_rejection(value: str, suffixes: Collection[str]) -> str | None:
    match = _HUMAN.fullmatch(value)
    if match is not None:
        number, suffix = match.groups()
        if suffix in suffixes and suffix.islower():
            return None
        if suffix in suffixes:
            return (
                None
                if "." not in number
                else f"decimals are not allowed with the binary suffix {suffix} "
                f"(did you mean {number}{suffix.lower()}?)"
            )
    if _parses(int, value):
        return None
    units = ", ".join(suffixes)
    return f"expected an integer, optionally with one unit suffix ({units})"


def _parses(convert: type[int] | type[float], text: str) -> bool:
    try:
        convert(text)
    except ValueError:
        return False
    return True
