"""Numbers from input, parsed once, with limits: one place for every integer and float
setting a file, a server or the command line gives.

``int("9" * 401)`` works and ``float(10**400)`` raises OverflowError; ``float("1e400")``
is ``inf`` and ``"nan"`` compares false with everything, so a range check written as
``x < low`` lets it through. These parsers refuse all of that with one line naming the
setting (:class:`BadNumber`, a ``KvtoolError`` and a ``ValueError``), accept what people
write (``100``, ``"100"``, ``1e3``, ``"2.5"``) and bound every value by
:data:`MOST_INT` / :data:`MOST_FLOAT` unless the caller gives a tighter bound. Text is
read with :mod:`decimal`, which takes any exponent without overflow and without a
quadratic conversion, so the bound is checked before any ``int`` or ``float`` exists.
"""

from __future__ import annotations

import decimal
import math
import re
from typing import Any

from kvtool.errors import KvtoolError

MOST_INT = (1 << 63) - 1  # what vLLM's and torch's int64 fields hold
MOST_FLOAT = 1e18  # past any count of seconds, steps, tokens or a ratio anyone means
_NUMBER_TEXT = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_SHOWN_CHARS = 40


class BadNumber(KvtoolError, ValueError):
    """A setting that is not a usable number; the message names it and says why."""


def shown(raw: Any) -> str:
    """``raw`` as an error message shows it: its repr, cut to a readable length."""
    text = repr(raw) if not isinstance(raw, int) or isinstance(raw, bool) else _int_text(raw)
    if len(text) <= _SHOWN_CHARS:
        return text
    return f"{text[:_SHOWN_CHARS]}... ({len(text)} characters)"


def _int_text(value: int) -> str:
    # str() of a huge int is quadratic and refused past Python's digit limit.
    if value.bit_length() > 200:
        return f"{'-' if value < 0 else ''}an integer of {value.bit_length()} bits"
    return str(value)


_NOT_FINITE = frozenset(
    {"nan", "+nan", "-nan", "inf", "+inf", "-inf", "infinity", "+infinity", "-infinity"}
)


def _decimal(raw: Any, what: str, noun: str) -> decimal.Decimal:
    """``raw`` (int, float or text) as an exact decimal; ``BadNumber`` for anything else
    (``noun`` says what was expected: "a number", "an integer")."""
    if isinstance(raw, bool):
        raise BadNumber(f"{what}={raw!r} is not {noun}")
    if isinstance(raw, int):
        if raw.bit_length() > 256:
            raise BadNumber(f"{what}={shown(raw)} is too large")
        return decimal.Decimal(raw)
    if isinstance(raw, float):
        if not math.isfinite(raw):
            raise BadNumber(f"{what}={raw!r} must be a finite number")
        return decimal.Decimal(raw)
    if isinstance(raw, str):
        text = raw.strip()
        if text.lower() in _NOT_FINITE:
            raise BadNumber(f"{what}={raw!r} must be a finite number")
        if len(text) > 1000 or not _NUMBER_TEXT.fullmatch(text):
            raise BadNumber(f"{what}={shown(raw)} is not {noun}")
        return decimal.Decimal(text)
    raise BadNumber(f"{what}={shown(raw)} is not {noun}")


def _bound(value: float) -> str:
    return str(value) if isinstance(value, int) else f"{value:g}"


def _check_range(
    value: decimal.Decimal,
    raw: Any,
    what: str,
    low: float | None,
    high: float | None,
    low_inclusive: bool,
) -> None:
    if low is not None and (value < low if low_inclusive else value <= low):
        raise BadNumber(
            f"{what}={shown(raw)} must be {'>=' if low_inclusive else '>'} {_bound(low)}"
        )
    if high is not None and value > high:
        raise BadNumber(f"{what}={shown(raw)} is too large: it must be <= {_bound(high)}")


def parse_int(
    raw: Any,
    what: str,
    *,
    low: int | None = None,
    high: int = MOST_INT,
) -> int:
    """A whole number in ``[low, high]`` from an int, a whole float or text (``"1e3"``)."""
    value = _decimal(raw, what, "an integer")
    if value != value.to_integral_value():
        raise BadNumber(f"{what}={shown(raw)} must be a whole number")
    _check_range(value, raw, what, low, high, True)
    return int(value)


def parse_float(
    raw: Any,
    what: str,
    *,
    low: float | None = None,
    low_inclusive: bool = True,
    high: float = MOST_FLOAT,
) -> float:
    """A finite number in the range, from an int, a float or text."""
    value = _decimal(raw, what, "a number")
    _check_range(value, raw, what, low, high, low_inclusive)
    return float(value)
