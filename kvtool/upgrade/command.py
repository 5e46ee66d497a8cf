"""``kvtool upgrade FILES... --to X``: parse options, plan the upgrade, fix, render.

Exit codes: 0 every invocation starts at the target as written (or after ``--fix``), 1 an
invocation has an error at the target, whether the upgrade brought it or it was there
before (after ``--fix`` too, while any is left), 2 bad input or usage.
"""

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from kvtool.audit.inputs.registry import format_choices
from kvtool.output.options import (
    OUTPUT_FORMAT_ENV,
    ColorMode,
    ColorOption,
    OutputFileOption,
    QuietOption,
)


class UpgradeFormat(str, Enum):
    text = "text"
    json = "json"
    sarif = "sarif"


def upgrade(
    paths: Annotated[
        list[str],
        typer.Argument(
            help="Files or directories with serve invocations; after '--', a vLLM command.",
            show_default=False,
        ),
    ],
    to_version: Annotated[str, typer.Option("--to", help="The vLLM release to move to.")],
    from_version: Annotated[
        str | None,
        typer.Option(
            "--from",
            help="The release running now (default: the image tag, then the vllm-version setting).",
        ),
    ] = None,
    input_format: Annotated[
        str | None,
        typer.Option(
            "--input-format",
            help=f"Force the input kind (default: detected per file): {format_choices()}; "
            "docs/audit-inputs.md says what each reads.",
        ),
    ] = None,
    output_format: Annotated[
        UpgradeFormat,
        typer.Option(
            "--output-format",
            envvar=OUTPUT_FORMAT_ENV,
            help="Report format: text, json (with schema_version; schemas in docs/schemas/) "
            "or sarif (the findings the target release adds).",
        ),
    ] = UpgradeFormat.text,
    output_file: OutputFileOption = None,
    fix: Annotated[
        bool,
        typer.Option(
            "--fix", help="Apply the safe fixes the target release needs and retag the image."
        ),
    ] = False,
    diff: Annotated[
        bool, typer.Option("--diff", help="Show those fixes as a diff without writing.")
    ] = False,
    exit_zero: Annotated[
        bool,
        typer.Option("--exit-zero", help="Exit 0 even when an invocation does not start at --to."),
    ] = False,
    quiet: QuietOption = False,
    color: ColorOption = ColorMode.auto,
) -> None:
    """What changes for each serve invocation, release by release, on the way to --to."""
    from kvtool.audit.fix_plan import show_fixes
    from kvtool.audit.inputs import read_argv, read_inputs
    from kvtool.audit.positionals import split_positionals
    from kvtool.audit.settings import load_settings
    from kvtool.output.kinds import emit
    from kvtool.output.streams import Output
    from kvtool.termsafe import terminal_line
    from kvtool.upgrade.apply import apply_upgrade_fixes
    from kvtool.upgrade.plan import Planner
    from kvtool.upgrade.render import UPGRADE

    out = Output(output_file, quiet, color)

    files, argv = split_positionals(paths)
    invocations = read_inputs([Path(p) for p in files], input_format=input_format) if files else []
    if argv:
        invocations.append(read_argv(argv))
    planner = Planner(load_settings(Path.cwd()), to_version, from_version)
    report = planner.run(invocations)
    for warning in sorted(
        {t.warning for i in report.invocations for t in (i.current, i.target) if t.warning}
    ):
        out.warnings.print(
            f"kvtool: warning: {terminal_line(warning)}", markup=False, soft_wrap=True
        )
    broken = report.breaks
    if fix or diff:
        run = apply_upgrade_fixes(invocations, report, write=fix, argv=argv)
        show_fixes(out, diff=run.diff, summary=run.summary, failures=run.failures, preview=diff)
        if run.failures:
            raise typer.Exit(2)
        if fix:
            broken = run.still_breaks
    if not diff:
        emit(UPGRADE, report, output_format.value, out)
    if broken and not exit_zero:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add ``upgrade`` to the root app."""
    app.command("upgrade")(upgrade)
