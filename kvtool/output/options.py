"""The options every command shares, declared once as ``Annotated`` types.

A command lists them in its signature (``output_file: OutputFileOption = None``), so
``kvtool CMD --help`` shows them with one wording everywhere.
"""

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer


class ColorMode(str, Enum):
    auto = "auto"
    always = "always"
    never = "never"


class TextOrJson(str, Enum):
    """The formats every command renders; commands with more declare their own enum."""

    text = "text"
    json = "json"


# Every command's --output-format reads this variable, so a CI job sets its format once.
OUTPUT_FORMAT_ENV = "KVTOOL_OUTPUT_FORMAT"
OutputFormatOption = Annotated[
    TextOrJson,
    typer.Option(
        "--output-format",
        envvar=OUTPUT_FORMAT_ENV,
        help="Report format: text, or json (with schema_version; schemas in docs/schemas/).",
    ),
]
OutputFileOption = Annotated[
    Path | None,
    typer.Option("-o", "--output-file", help="Write the report here instead of stdout."),
]
QuietOption = Annotated[
    bool,
    typer.Option(
        "-q", "--quiet", help="No progress or notes on stderr (warnings and errors stay)."
    ),
]
ColorOption = Annotated[
    ColorMode,
    typer.Option(
        "--color",
        help="Escape codes: auto (a terminal, unless NO_COLOR is set or FORCE_COLOR is), "
        "always or never.",
    ),
]
