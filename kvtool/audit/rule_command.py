"""``kvtool rule CODE`` / ``kvtool rule --all``: explain audit rules (what, why, example, fix,
releases, references), as ``ruff rule`` does."""

from enum import Enum
from typing import Annotated

import typer

from kvtool.output.completion import complete_rule
from kvtool.output.options import (
    OUTPUT_FORMAT_ENV,
    ColorMode,
    ColorOption,
    OutputFileOption,
    QuietOption,
)


class RuleFormat(str, Enum):
    text = "text"
    json = "json"
    markdown = "markdown"


def rule(
    code: Annotated[
        str | None,
        typer.Argument(
            help="Rule code or name, e.g. SZ001 or kv-offloading-size-per-rank.",
            autocompletion=complete_rule,
        ),
    ] = None,
    all_rules: Annotated[bool, typer.Option("--all", help="Every rule.")] = False,
    output_format: Annotated[
        RuleFormat,
        typer.Option("--output-format", envvar=OUTPUT_FORMAT_ENV, help="text, json or markdown."),
    ] = RuleFormat.text,
    output_file: OutputFileOption = None,
    quiet: QuietOption = False,
    color: ColorOption = ColorMode.auto,
) -> None:
    """Explain an audit rule (what, why, example, fix, releases, references)."""
    from kvtool.audit.registry import registry
    from kvtool.audit.render.kind import RULE, RuleSelection
    from kvtool.errors import KvtoolError
    from kvtool.output.kinds import emit
    from kvtool.output.streams import Output

    if all_rules == (code is not None):
        raise KvtoolError("rule: give one rule code or name, or --all")
    if all_rules:
        selection = RuleSelection(tuple(registry), detailed=False)
    else:
        assert code is not None
        found = registry.get(code)
        if found is None:
            from kvtool.suggest import did_you_mean_rule

            raise KvtoolError(
                f"rule: {code!r} is not a rule code or name (see `kvtool rule --all`)."
                + did_you_mean_rule(code, [r.code for r in registry], [r.name for r in registry])
            )
        selection = RuleSelection((found,), detailed=True)
    emit(RULE, selection, output_format.value, Output(output_file, quiet, color))


def register(app: typer.Typer) -> None:
    """Add ``rule`` to the root app."""
    app.command("rule")(rule)
