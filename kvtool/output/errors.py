"""The one wording of a bad option value (one line on stderr, exit 2 via the CLI root)."""

from __future__ import annotations

from collections.abc import Iterable

from typer import Abort

from kvtool.errors import KvtoolError
from kvtool.output.clickapi import ClickException

__all__ = ["Abort", "ClickException", "bad_option", "check_choice", "usage_error_line"]


def bad_option(flag: str, value: object, why: str) -> KvtoolError:
    """``--flag 'value': why``, raised by the caller: ``raise bad_option(...)``."""
    if isinstance(value, str):
        shown = repr(value)
    elif isinstance(value, float):
        shown = f"{value:g}"
    else:
        shown = str(value)
    return KvtoolError(f"{flag} {shown}: {why}")


def check_choice(flag: str, value: str, choices: Iterable[str]) -> None:
    """Refuse ``value`` unless it is one of ``choices``."""
    allowed = tuple(choices)
    if value not in allowed:
        raise bad_option(flag, value, f"use one of {', '.join(allowed)}")


def usage_error_line(exc: ClickException) -> str:
    """A parser error (unknown option, bad choice, missing value) as one line naming the
    command, where click would print a usage block."""
    message = " ".join(exc.format_message().split())
    context = getattr(exc, "ctx", None)
    command = context.command_path if context is not None else "kvtool"
    return f"{command}: {message} (see `{command} --help`)"
