"""The command line a user gave, rebuilt from what the command's parser read: for files that
record how they were made (``kvtool launch``'s header), in a canonical order."""

from __future__ import annotations

from collections.abc import Iterable
from enum import Enum
from typing import Any

import typer

from kvtool.output.clickapi import ParameterSource


def _word(value: Any) -> str:
    return str(value.value if isinstance(value, Enum) else value)


def given_command_line(
    ctx: typer.Context, command: str, leave_out: Iterable[str] = ()
) -> tuple[str, ...]:
    """``kvtool COMMAND`` and every argument and option the user set (on the command line or
    through its environment variable), but those named in ``leave_out`` (where the output
    goes, verbosity): the words that make the same output again."""
    skipped = set(leave_out)
    arguments: list[str] = []
    options: list[str] = []
    for param in ctx.command.params:
        name = param.name
        if name is None or name in skipped:
            continue
        if ctx.get_parameter_source(name) not in (
            ParameterSource.COMMANDLINE,
            ParameterSource.ENVIRONMENT,
        ):
            continue
        value = ctx.params.get(name)
        values = list(value) if isinstance(value, (list, tuple)) else [value]
        if param.param_type_name == "argument":
            arguments.extend(_word(v) for v in values if v is not None)
            continue
        flag = max(param.opts, key=len)
        if getattr(param, "is_flag", False):
            if value:
                options.append(flag)
            elif param.secondary_opts:
                options.append(max(param.secondary_opts, key=len))
            continue
        options.extend(word for item in values if item is not None for word in (flag, _word(item)))
    return ("kvtool", command, *arguments, *options)
