"""docker compose's variable interpolation: ``${NAME}``, ``${NAME:-default}``, ``$NAME``.

Compose substitutes these in the whole file before it runs anything, from the shell's
environment and the ``.env`` file of the project directory (the compose file's own
directory by default), an unset variable taking the ``:-``/``-`` default
(https://docs.docker.com/reference/compose-file/interpolation/,
https://docs.docker.com/compose/how-tos/environment-variables/variable-interpolation/).
kvtool cannot know the operator's shell, so only the ``.env`` file and the defaults are
applied; a variable neither gives stays as written (a value known only at run time).
"""

from __future__ import annotations

import os
import re
from functools import lru_cache

# `${NAME}`, `${NAME:-default}`, `${NAME-default}`, `$NAME` (`$$` is a literal `$`).
INTERPOLATION = re.compile(r"(?<!\$)\$\{(\w+)(?::?-([^}]*))?\}|(?<!\$)\$(\w+)")
# A .env file is a few lines; the cap guards a walk that meets a huge file of that name.
_DOTENV_BYTES = 1 << 20


@lru_cache(maxsize=64)
def dotenv(directory: str) -> dict[str, str]:
    """``NAME=value`` lines of the ``.env`` in ``directory`` (quotes stripped); {} when absent."""
    try:
        with open(os.path.join(directory, ".env"), "rb") as handle:
            text = handle.read(_DOTENV_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return {}
    values: dict[str, str] = {}
    for line in text.splitlines():
        name, equals, value = line.strip().removeprefix("export ").partition("=")
        if equals and name.isidentifier():
            values[name] = value.strip().strip("\"'")
    return values


def interpolate(value: str, known: dict[str, str]) -> str | None:
    """``value`` with every variable replaced by its ``known`` value or its default; None
    when one has neither."""
    unknown = False

    def substitute(match: re.Match[str]) -> str:
        nonlocal unknown
        name = match.group(1) or match.group(3)
        if name in known:
            return known[name]
        if match.group(2) is not None:
            return match.group(2)
        unknown = True
        return ""

    result = INTERPOLATION.sub(substitute, value)
    return None if unknown else result


def names_in(value: str) -> list[str]:
    return [m.group(1) or m.group(3) for m in INTERPOLATION.finditer(value)]
