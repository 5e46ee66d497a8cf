"""``kvtool audit`` and ``kvtool rule``: parse options, call the audit library, render.

Only typer and the standard library are imported at module level; the audit
machinery is imported inside the commands so ``kvtool --help`` stays fast.
Exit codes: 0 clean, 1 findings at or above ``--fail-on``, 2 bad input or usage.
"""

import sys
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from kvtool.audit.engine import AuditReport
    from kvtool.audit.model import Invocation


class OutputFormat(str, Enum):
    text = "text"
    json = "json"
    sarif = "sarif"
    github = "github"


class FailOn(str, Enum):
    info = "info"
    warning = "warning"
    error = "error"


class RuleFormat(str, Enum):
    text = "text"
    json = "json"
    markdown = "markdown"


VLLM_HEADS = ("vllm", "serve")


def split_positionals(words: list[str]) -> tuple[list[str], list[str]]:
    """Split ``[PATHS]... [ARGV]`` (typer folds the words after ``--`` into the same list).

    ARGV starts at the first word that is not an existing path and begins a vLLM command
    (``vllm serve``, ``python -m vllm...``, ``X=1 vllm ...``, ``serve ...``).
    """
    from kvtool.audit.inputs.command_line import find_serve

    for index, word in enumerate(words):
        rest = words[index:]
        if rest[:2] == ["vllm", "serve"]:
            return words[:index], rest  # even where a folder named vllm exists (a vLLM checkout)
        if Path(word).exists():
            continue
        if word in VLLM_HEADS or find_serve(rest) is not None:
            return words[:index], rest
    return words, []


def _read(paths: list[str], argv: list[str], input_format: str | None) -> "list[Invocation]":
    from kvtool.audit.inputs import read_argv, read_inputs
    from kvtool.errors import KvtoolError

    if not paths and not argv:
        raise KvtoolError(
            "audit: nothing to audit: give files, or a command after '--' (-- vllm serve MODEL ...)"
        )
    invocations = read_inputs([Path(p) for p in paths], input_format=input_format) if paths else []
    if argv:
        invocations.append(read_argv(argv))
    return invocations


def _emit(text: str, output_file: Path | None) -> None:
    if output_file is None:
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        from kvtool.fsio import atomic_write_text

        atomic_write_text(output_file, text)


def _render(report: "AuditReport", output_format: OutputFormat, output_file: Path | None) -> None:
    if output_format is OutputFormat.text:
        from rich.console import Console

        from kvtool.audit.render.text import print_report

        if output_file is None:
            print_report(report, Console(file=sys.stdout, highlight=False))
        else:
            import io

            buffer = io.StringIO()
            print_report(report, Console(file=buffer, no_color=True, highlight=False, width=200))
            _emit(buffer.getvalue(), output_file)
        return
    if output_format is OutputFormat.json:
        from kvtool.audit.render.json_report import render
    elif output_format is OutputFormat.sarif:
        from kvtool.audit.render.sarif import render
    else:
        from kvtool.audit.render.github import render
    _emit(render(report), output_file)


def audit(
    paths: Annotated[
        list[str] | None,
        typer.Argument(
            help=(
                "Files or directories to audit; after '--', a vLLM command "
                "(vllm serve MODEL ...)."
            ),
            show_default=False,
        ),
    ] = None,
    vllm_version: Annotated[
        str | None,
        typer.Option(
            "--vllm-version", help="Target vLLM release (default: image tag, then newest table)."
        ),
    ] = None,
    input_format: Annotated[
        str | None,
        typer.Option(
            "--input-format",
            help="Force the input kind: shell, vllm-config, kubernetes, compose, kaito.",
        ),
    ] = None,
    output_format: Annotated[
        OutputFormat,
        typer.Option("--output-format", envvar="KVTOOL_OUTPUT_FORMAT", help="Report format."),
    ] = OutputFormat.text,
    output_file: Annotated[
        Path | None,
        typer.Option("-o", "--output-file", help="Write the report here instead of stdout."),
    ] = None,
    fail_on: Annotated[
        FailOn | None,
        typer.Option(
            "--fail-on", help="Exit 1 for findings at or above this severity (default error)."
        ),
    ] = None,
    exit_zero: Annotated[
        bool,
        typer.Option("--exit-zero", help="Exit 0 even with findings (bad input still exits 2)."),
    ] = False,
    select: Annotated[
        list[str] | None,
        typer.Option(
            "--select", help="Only these rules (codes, names, prefixes, ALL); repeatable."
        ),
    ] = None,
    ignore: Annotated[
        list[str] | None,
        typer.Option("--ignore", help="Skip these rules (codes, names or prefixes); repeatable."),
    ] = None,
    no_suppressions: Annotated[
        bool, typer.Option("--no-suppressions", help="Ignore inline and annotation suppressions.")
    ] = False,
    fix: Annotated[
        bool,
        typer.Option("--fix", help="Apply safe fixes to shell-script inputs and show the diff."),
    ] = False,
    diff: Annotated[
        bool, typer.Option("--diff", help="Show the safe fixes as a diff without writing.")
    ] = False,
    unsafe_fixes: Annotated[
        bool, typer.Option("--unsafe-fixes", help="Include unsafe fixes in --fix/--diff.")
    ] = False,
    host_ram_gib: Annotated[
        float | None,
        typer.Option("--host-ram-gib", min=0.001, help="Host RAM for sizing rules (GiB)."),
    ] = None,
    show_settings: Annotated[
        bool, typer.Option("--show-settings", help="Print the resolved settings and exit.")
    ] = False,
    image_verdicts: Annotated[
        Path | None,
        typer.Option(
            "--image-verdicts",
            help="An `inspect-image --output-format json` report for the image rules (IM).",
        ),
    ] = None,
) -> None:
    """Lint vLLM serve configurations against the target release's generated rule tables."""
    from kvtool.audit.engine import Auditor
    from kvtool.audit.model import Severity
    from kvtool.audit.normalize import normalize
    from kvtool.audit.settings import apply_cli, load_settings
    from kvtool.audit.tables import ShippedTables
    from kvtool.console import stderr

    settings = apply_cli(
        load_settings(Path.cwd()),
        vllm_version=vllm_version,
        select=select,
        ignore=ignore,
        fail_on=Severity(fail_on.value) if fail_on else None,
        host_ram_gib=host_ram_gib,
    )
    if show_settings:
        import json

        sys.stdout.write(json.dumps(settings.as_file_keys(), indent=2) + "\n")
        raise typer.Exit(0)
    file_paths, argv = split_positionals(list(paths or []))
    if output_file is not None:
        from kvtool.fsio import refuse_overwriting_inputs

        refuse_overwriting_inputs(output_file, file_paths, "-o")
    invocations = _read(file_paths, argv, input_format)
    if output_file is not None:
        refuse_overwriting_inputs(output_file, {i.file for i in invocations if i.file}, "-o")
    extras = {}
    if image_verdicts is not None:
        from kvtool.audit.rules.image import IMAGE_VERDICTS
        from kvtool.image import load_image_verdicts

        extras[IMAGE_VERDICTS] = load_image_verdicts(image_verdicts)
    auditor = Auditor(
        ShippedTables(),
        normalize,
        settings,
        use_suppressions=not no_suppressions,
        extras=extras,
        version_from_cli=vllm_version is not None,
    )
    report = auditor.run(invocations)
    for warning in sorted({i.target.warning for i in report.invocations if i.target.warning}):
        from kvtool.termsafe import terminal_line

        stderr.print(f"kvtool: warning: {terminal_line(warning)}", markup=False, soft_wrap=True)
    if fix or diff:
        from kvtool.audit.fixing import apply_fixes

        applicable = ("safe", "unsafe") if unsafe_fixes else ("safe",)
        run = apply_fixes(invocations, report, applicable=applicable, write=fix, argv=argv)
        if diff:
            sys.stdout.write(run.diff)
        elif run.diff:  # --fix: stdout keeps only the report, a machine format may follow
            from kvtool.termsafe import terminal_text

            stderr.print(
                terminal_text(run.diff), markup=False, highlight=False, soft_wrap=True, end=""
            )
        stderr.print(run.summary, markup=False, soft_wrap=True)
        for failure in run.failures:
            from kvtool.termsafe import terminal_line

            stderr.print(f"kvtool: error: {terminal_line(failure)}", markup=False, soft_wrap=True)
        if fix:
            report = without_fixed(report, run.fixed_codes)
        if run.failures:
            raise typer.Exit(2)
    if not diff:
        _render(report, output_format, output_file)
    from kvtool.audit.render.text import summary

    if output_format is OutputFormat.text:
        stderr.print(summary(report), markup=False, soft_wrap=True)
    if not exit_zero and report.fails(settings.fail_on):
        raise typer.Exit(1)


def without_fixed(
    report: "AuditReport", fixed: set[tuple[str, str | None, int | None]]
) -> "AuditReport":
    """The report less the findings ``--fix`` just fixed (the exit code follows what remains)."""
    for inv in report.invocations:
        inv.findings = [
            f
            for f in inv.findings
            if (
                f.code,
                f.location.file if f.location else None,
                f.location.line if f.location else None,
            )
            not in fixed
        ]
    return report


def rule(
    code: Annotated[
        str | None,
        typer.Argument(help="Rule code or name, e.g. SZ001 or kv-offloading-size-per-rank."),
    ] = None,
    all_rules: Annotated[bool, typer.Option("--all", help="Every rule.")] = False,
    output_format: Annotated[
        RuleFormat, typer.Option("--output-format", help="text, json or markdown.")
    ] = RuleFormat.text,
) -> None:
    """Explain an audit rule (what, why, example, fix, releases, references)."""
    from kvtool.audit import ruledocs
    from kvtool.audit.registry import registry
    from kvtool.errors import KvtoolError

    if all_rules == (code is not None):
        raise KvtoolError("rule: give one rule code or name, or --all")
    if all_rules:
        if output_format is RuleFormat.json:
            sys.stdout.write(ruledocs.as_json())
        elif output_format is RuleFormat.markdown:
            sys.stdout.write(ruledocs.markdown())
        else:
            sys.stdout.write("".join(f"{r.code} {r.name}: {r.summary}\n" for r in registry))
        return
    assert code is not None
    found = registry.get(code)
    if found is None:
        raise KvtoolError(f"rule: {code!r} is not a rule code or name (see `kvtool rule --all`)")
    if output_format is RuleFormat.json:
        import json

        sys.stdout.write(json.dumps(found.meta.as_dict(), indent=2) + "\n")
    elif output_format is RuleFormat.markdown:
        sys.stdout.write(ruledocs.rule_markdown(found).rstrip() + "\n")
    else:
        sys.stdout.write(ruledocs.rule_text(found))


def register(app: typer.Typer) -> None:
    """Add ``audit`` and ``rule`` to the root app."""
    app.command("audit", no_args_is_help=False)(audit)
    app.command("rule")(rule)
