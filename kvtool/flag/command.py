"""``kvtool flag NAME``: parse options, look the name up, render.

Exit codes: 0 the name exists in some release, 1 it exists in none (the nearest names
are reported), 2 bad usage.
"""

from typing import Annotated

import typer

from kvtool.output.options import (
    OUTPUT_FORMAT_ENV,
    ColorMode,
    ColorOption,
    OutputFileOption,
    QuietOption,
    TextOrJson,
)


def flag(
    name: Annotated[
        str,
        typer.Argument(
            help="A serve flag (--kv-offloading-size, --no-enable-prefix-caching), an "
            "environment variable, a KV connector or an offload tier type."
        ),
    ],
    output_format: Annotated[
        TextOrJson,
        typer.Option(
            "--output-format",
            envvar=OUTPUT_FORMAT_ENV,
            help="Report format: text, or json (with schema_version; schemas in docs/schemas/).",
        ),
    ] = TextOrJson.text,
    output_file: OutputFileOption = None,
    quiet: QuietOption = False,
    color: ColorOption = ColorMode.auto,
) -> None:
    """History of a flag, env var, connector or tier across every vLLM release table."""
    from kvtool.flag.history import Unknown, history
    from kvtool.flag.render import FLAG
    from kvtool.output.kinds import emit
    from kvtool.output.streams import Output

    result = history(name)
    emit(FLAG, result, output_format.value, Output(output_file, quiet, color))
    if isinstance(result, Unknown):
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add ``flag`` to the root app."""
    # A flag name starts with dashes: it is the argument, not an option of this command.
    app.command("flag", context_settings={"ignore_unknown_options": True})(flag)
