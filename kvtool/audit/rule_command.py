"""``kvtool rule CODE`` / ``kvtool rule --all``: explain audit rules (what, why, example, fix,
releases, references), as ``ruff rule`` does; ``kvtool rule --bugs`` / ``kvtool rule KB-...``
/ ``kvtool rule --export-osv DIR``: the known-bug database (``kvtool.bugdb``)."""

import sys
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from kvtool.output.completion import complete_rule
from kvtool.output.options import (
    OUTPUT_FORMAT_ENV,
    ColorMode,
    ColorOption,
    OutputFileOption,
    QuietOption,
)

if TYPE_CHECKING:
    from kvtool.output.streams import Output


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
    bugs: Annotated[
        bool, typer.Option("--bugs", help="List the known-bug database (rules/bugs/).")
    ] = False,
    export_osv: Annotated[
        Path | None,
        typer.Option(
            "--export-osv",
            metavar="DIR",
            help="Write every bug record as an OSV document (<id>.json) into a new DIR.",
        ),
    ] = None,
    output_format: Annotated[
        RuleFormat,
        typer.Option("--output-format", envvar=OUTPUT_FORMAT_ENV, help="text, json or markdown."),
    ] = RuleFormat.text,
    output_file: OutputFileOption = None,
    quiet: QuietOption = False,
    color: ColorOption = ColorMode.auto,
) -> None:
    """Explain an audit rule or a known-bug record (KB-...), or list the bug database."""
    from kvtool.audit.registry import registry
    from kvtool.audit.render.kind import RULE, RuleSelection
    from kvtool.errors import KvtoolError
    from kvtool.output.kinds import emit
    from kvtool.output.streams import Output

    if bugs or export_osv is not None or (code or "").upper().startswith("KB-"):
        _bug_records(code, bugs, export_osv, output_format, Output(output_file, quiet, color))
        return
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


def _bug_records(
    code: str | None,
    listing: bool,
    export_osv: Path | None,
    output_format: RuleFormat,
    output: "Output",
) -> None:
    """``kvtool rule --bugs``, ``kvtool rule KB-...`` and ``kvtool rule --export-osv DIR``."""
    from kvtool.bugdb import record, records
    from kvtool.bugdb.render import detail
    from kvtool.bugdb.render import listing as list_text
    from kvtool.errors import KvtoolError

    fmt = "json" if output_format is RuleFormat.json else "text"
    if export_osv is not None:
        from kvtool.bugdb.osv import export

        if export_osv.exists() and (not export_osv.is_dir() or any(export_osv.iterdir())):
            raise KvtoolError(f"rule --export-osv: {export_osv} exists and is not an empty folder")
        written = export(export_osv)
        print(f"wrote {len(written)} OSV documents to {export_osv}", file=sys.stderr)
        return
    if listing:
        output.write(list_text(records(), fmt))
        return
    assert code is not None
    found = record(code)
    if found is None:
        raise KvtoolError(f"rule: {code!r} is not a bug record (see `kvtool rule --bugs`)")
    output.write(detail(found, fmt))


def register(app: typer.Typer) -> None:
    """Add ``rule`` to the root app."""
    app.command("rule")(rule)
