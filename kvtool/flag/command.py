"""``kvtool flag NAME``: parse options, look the name up, render.

Exit codes: 0 the name exists in some release, 1 it exists in none (the nearest names
are reported), 2 bad usage.
"""

import sys
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer


class FlagFormat(str, Enum):
    text = "text"
    json = "json"


def flag(
    name: Annotated[
        str,
        typer.Argument(
            help="A serve flag (--kv-offloading-size, --no-enable-prefix-caching), an "
            "environment variable, a KV connector or an offload tier type."
        ),
    ],
    output_format: Annotated[
        FlagFormat,
        typer.Option("--output-format", envvar="KVTOOL_OUTPUT_FORMAT", help="Report format."),
    ] = FlagFormat.text,
    output_file: Annotated[
        Path | None,
        typer.Option("-o", "--output-file", help="Write the report here instead of stdout."),
    ] = None,
) -> None:
    """History of a flag, env var, connector or tier across every vLLM release table."""
    from kvtool.flag.history import Unknown, history
    from kvtool.flag.render import render_json, render_text

    result = history(name)
    text = render_json(result) if output_format is FlagFormat.json else render_text(result)
    if output_file is None:
        sys.stdout.write(text)
    else:
        output_file.write_text(text, encoding="utf-8")
    if isinstance(result, Unknown):
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add ``flag`` to the root app."""
    # A flag name starts with dashes: it is the argument, not an option of this command.
    app.command("flag", context_settings={"ignore_unknown_options": True})(flag)
