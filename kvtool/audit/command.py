"""``kvtool audit`` and ``kvtool rule``: parse options, call the audit library, render.

Only typer and the standard library are imported at module level; the audit
machinery is imported inside the commands so ``kvtool --help`` stays fast.
Exit codes: 0 clean, 1 findings at or above ``--fail-on`` or an input that could not be
read (reported, the other inputs still audited), 2 usage (no input at all, a bad option,
a path that does not exist).
"""

import sys
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from kvtool.audit.inputs.registry import format_choices
from kvtool.audit.positionals import STDIN, split_positionals
from kvtool.output.completion import complete_rule, complete_version
from kvtool.output.options import (
    OUTPUT_FORMAT_ENV,
    ColorMode,
    ColorOption,
    OutputFileOption,
    QuietOption,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from kvtool.audit.engine import AuditReport
    from kvtool.audit.inputs import InputSet
    from kvtool.audit.live import LiveServer
    from kvtool.audit.settings import AuditSettings
    from kvtool.output.streams import Output


class OutputFormat(str, Enum):
    text = "text"
    json = "json"
    sarif = "sarif"
    github = "github"


class FailOn(str, Enum):
    info = "info"
    warning = "warning"
    error = "error"


def _read(
    paths: list[str],
    argv: list[str],
    input_format: str | None,
    stdin_filename: str | None,
    excluded: "Callable[[str], bool] | None" = None,
) -> "InputSet":
    from kvtool.audit.inputs import InputSet, StdinInput, read_argv, read_input_set
    from kvtool.errors import KvtoolError

    if not paths and not argv:
        raise KvtoolError(
            "audit: nothing to audit: give files, or a command after '--' (-- vllm serve MODEL ...)"
        )
    if stdin_filename is not None and STDIN not in paths:
        raise KvtoolError("--stdin-filename: only with '-' (read the input from stdin)")
    stdin = None
    if STDIN in paths:
        from kvtool.fsio import decode_text, read_input_bytes

        name = stdin_filename or "<stdin>"
        stdin = StdinInput(decode_text(read_input_bytes(STDIN), name), name)
    files = [Path(p) for p in paths if p != STDIN]
    found = (
        read_input_set(files, input_format=input_format, stdin=stdin, excluded=excluded)
        if files or stdin
        else InputSet()
    )
    if argv:
        found.invocations.append(read_argv(argv))
    return found


def audit(
    paths: Annotated[
        list[str] | None,
        typer.Argument(
            help=(
                "Files or directories to audit; after '--', a vLLM command (vllm serve MODEL ...)."
            ),
            show_default=False,
        ),
    ] = None,
    vllm_version: Annotated[
        str | None,
        typer.Option(
            "--vllm-version",
            help="Target vLLM release (default: what the input states: a pip pin in the "
            "engine's file, the Dockerfile it is built from, the image tag, a runtime "
            "annotation, a requirements pin; then the newest table).",
            autocompletion=complete_version,
        ),
    ] = None,
    lmcache_version: Annotated[
        str | None,
        typer.Option(
            "--lmcache-version",
            help="The LMCache release installed next to vLLM (default: a pip install or "
            "requirements pin in the input, then an lmcache/vllm-openai image tag).",
        ),
    ] = None,
    component_version: Annotated[
        list[str] | None,
        typer.Option(
            "--component-version",
            help="NAME=RELEASE of another stack component next to vLLM (nixl, mooncake, "
            "dynamo, llm-d, kserve, kaito, production-stack, aibrix); repeatable (default: "
            "a pip pin in the input, the image's installed packages, an image tag).",
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
    stdin_filename: Annotated[
        str | None,
        typer.Option(
            "--stdin-filename",
            help="With '-': the name stdin is reported under (and detected by), like ruff's.",
        ),
    ] = None,
    verbose: Annotated[
        bool,
        typer.Option(
            "--verbose",
            "-v",
            help="Name the files skipped for starting no server; print each invocation's notes.",
        ),
    ] = False,
    output_format: Annotated[
        OutputFormat,
        typer.Option("--output-format", envvar=OUTPUT_FORMAT_ENV, help="Report format."),
    ] = OutputFormat.text,
    output_file: OutputFileOption = None,
    quiet: QuietOption = False,
    color: ColorOption = ColorMode.auto,
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
    allow_unrendered: Annotated[
        bool,
        typer.Option(
            "--allow-unrendered",
            help="Do not fail the run for chart templates that could not be rendered (no "
            "helm binary, no helm extra, or Helm refused the chart); they are still "
            "counted as not audited.",
        ),
    ] = False,
    select: Annotated[
        list[str] | None,
        typer.Option(
            "--select",
            help="Only these rules (codes, names, prefixes, ALL); repeatable.",
            autocompletion=complete_rule,
        ),
    ] = None,
    ignore: Annotated[
        list[str] | None,
        typer.Option(
            "--ignore",
            help="Skip these rules (codes, names or prefixes); repeatable.",
            autocompletion=complete_rule,
        ),
    ] = None,
    no_suppressions: Annotated[
        bool, typer.Option("--no-suppressions", help="Ignore inline and annotation suppressions.")
    ] = False,
    fix: Annotated[
        bool,
        typer.Option(
            "--fix",
            help="Apply safe fixes in place (scripts, Kubernetes manifests, compose files) "
            "and show the diff; fixes for other inputs are listed.",
        ),
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
    model_config: Annotated[
        Path | None,
        typer.Option(
            "--model-config",
            help="The served model's config.json (or model directory) for the model rules.",
        ),
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
    url: Annotated[
        str | None,
        typer.Option(
            "--url",
            help="Audit the running vLLM server at http://HOST:PORT (its /version, "
            "/v1/models and /metrics) instead of files.",
        ),
    ] = None,
    header: Annotated[
        list[str] | None,
        typer.Option(
            "--header",
            help="HTTP header for --url, 'Name: value' (default: $KVTOOL_AUDIT_HEADER, "
            "else a bearer $VLLM_API_KEY); repeatable.",
        ),
    ] = None,
    baseline: Annotated[
        Path | None,
        typer.Option(
            "--baseline",
            help="Report only findings not recorded in this baseline file (setting: baseline).",
        ),
    ] = None,
    update_baseline: Annotated[
        bool,
        typer.Option(
            "--update-baseline", help="Record every finding of this run in the --baseline file."
        ),
    ] = False,
    exclude: Annotated[
        list[str] | None,
        typer.Option(
            "--exclude",
            help="Gitignore-style patterns a directory walk skips (replaces the exclude "
            "setting); repeatable.",
        ),
    ] = None,
    extend_exclude: Annotated[
        list[str] | None,
        typer.Option(
            "--extend-exclude", help="Patterns to skip in addition to exclude; repeatable."
        ),
    ] = None,
) -> None:
    """Lint vLLM serve configurations against the target release's generated rule tables."""
    from kvtool.audit.engine import Auditor
    from kvtool.audit.model import Severity
    from kvtool.audit.normalize import normalize
    from kvtool.audit.render.kind import AUDIT
    from kvtool.audit.settings import apply_cli, load_settings
    from kvtool.audit.tables import ShippedTables
    from kvtool.output.kinds import emit
    from kvtool.output.streams import Output
    from kvtool.termsafe import terminal_line

    out = Output(output_file=output_file, quiet=quiet, color=color)

    live = None
    if url is not None:
        live = _read_live(url, header or [], paths or [], fix or diff, out)
    settings = apply_cli(
        load_settings(Path.cwd()),
        vllm_version=vllm_version or (live.version if live else None),
        lmcache_version=lmcache_version,
        component_versions=_component_versions(component_version or []),
        select=select,
        ignore=ignore,
        fail_on=Severity(fail_on.value) if fail_on else None,
        host_ram_gib=host_ram_gib,
        model_config=str(model_config) if model_config is not None else None,
        exclude=exclude,
        extend_exclude=extend_exclude,
    )
    baseline_path = _baseline_path(baseline, settings, update_baseline)
    if settings.model_config is not None:
        from kvtool.models import identify

        identify("--model-config", config_path=settings.model_config)  # bad file: exit 2
    if show_settings:
        import json

        sys.stdout.write(json.dumps(settings.as_file_keys(), indent=2) + "\n")
        raise typer.Exit(0)
    file_paths, argv = split_positionals(list(paths or []))
    if output_file is not None:
        from kvtool.fsio import refuse_overwriting_inputs

        refuse_overwriting_inputs(output_file, file_paths, "-o")
    if live:
        from kvtool.audit.inputs import InputSet

        inputs = InputSet(invocations=[live.invocation])
    else:
        inputs = _read(file_paths, argv, input_format, stdin_filename, settings.excluded())
    invocations = inputs.invocations
    _refuse_when_nothing_was_read(inputs)
    if output_file is not None:
        refuse_overwriting_inputs(output_file, {i.file for i in invocations if i.file}, "-o")
    extras = {}
    installed: dict[str, str] = {}
    if image_verdicts is not None:
        from kvtool.audit.rules.image import IMAGE_VERDICTS
        from kvtool.image import load_image_distributions, load_image_verdicts

        extras[IMAGE_VERDICTS] = load_image_verdicts(image_verdicts)
        installed = load_image_distributions(image_verdicts)
    auditor = Auditor(
        ShippedTables(),
        normalize,
        settings,
        use_suppressions=not no_suppressions,
        extras=extras,
        version_from_cli=vllm_version is not None,
        lmcache_from_cli=lmcache_version is not None,
        lmcache_pins=inputs.lmcache_pins,
        vllm_claims=inputs.vllm_claims,
        component_pins=inputs.component_pins,
        installed=installed,
        component_from_cli=frozenset(_component_versions(component_version or [])),
    )
    report = auditor.run(invocations)
    report.skipped = list(inputs.skipped)
    if verbose:
        for skipped in inputs.skipped:
            if not skipped.problem:
                out.chatter.print(
                    terminal_line(f"kvtool: skipped {skipped.file}: {skipped.reason}"),
                    markup=False,
                    soft_wrap=True,
                )
        from kvtool.audit.render.text import invocation_notes

        for line in invocation_notes(report):
            out.chatter.print(line, markup=False, soft_wrap=True)
    if not invocations and not any(s.problem for s in inputs.skipped):
        out.warnings.print(
            "kvtool: warning: no vLLM server found in the input",
            markup=False,
            emoji=False,
            soft_wrap=True,
        )
    for warning in sorted({i.target.warning for i in report.invocations if i.target.warning}):
        # Plain text: no :name: emoji codes either (their table costs every run a start-up).
        out.warnings.print(
            f"kvtool: warning: {terminal_line(warning)}", markup=False, emoji=False, soft_wrap=True
        )
    if fix or diff:
        from kvtool.audit.fix_plan import apply_fixes, show_fixes

        applicable = ("safe", "unsafe") if unsafe_fixes else ("safe",)
        run = apply_fixes(
            invocations,
            report,
            applicable=applicable,
            write=fix,
            argv=argv,
            stdin_name=stdin_filename,
        )
        show_fixes(out, diff=run.diff, summary=run.summary, failures=run.failures, preview=diff)
        if fix:
            report = without_fixed(report, run.fixed_codes)
        if run.failures:
            raise typer.Exit(2)
    if baseline_path is not None:
        from kvtool.audit import baseline as baselines

        if update_baseline:
            written = baselines.write_baseline(
                baseline_path, report, [*file_paths, *(i.file for i in invocations if i.file)]
            )
            out.chatter.print(
                f"kvtool: recorded {written} finding(s) in {terminal_line(str(baseline_path))}",
                markup=False,
                soft_wrap=True,
            )
            raise typer.Exit(0)
        if baseline_path.exists():
            known = baselines.load_baseline(baseline_path)
            report.baselined = baselines.without_baselined(
                report, known, baseline_path.resolve().parent
            )
        else:
            from kvtool.errors import KvtoolError

            raise KvtoolError(
                f"--baseline {baseline_path}: no such file (write it with --update-baseline)"
            )
    if not diff:
        emit(AUDIT, report, output_format.value, out)
    from kvtool.audit.render.text import summary

    if output_format is OutputFormat.text:
        out.chatter.print(summary(report), markup=False, soft_wrap=True)
    unrendered_fails = bool(report.unrendered) and not allow_unrendered
    if not exit_zero and (report.fails(settings.fail_on) or report.unreadable or unrendered_fails):
        raise typer.Exit(1)


def _refuse_when_nothing_was_read(inputs: "InputSet") -> None:
    """Every input failed to read: a usage error (exit 2), not an audit that found nothing.

    Among inputs that did read, an unreadable file is a line of the report instead, and
    the other files are still audited.
    """
    from kvtool.errors import KvtoolError

    if inputs.invocations or not inputs.skipped or not all(s.problem for s in inputs.skipped):
        return
    first = inputs.skipped[0].describe()
    more = len(inputs.skipped) - 1
    raise KvtoolError(first + (f" (and {more} more input(s) not read)" if more else ""))


def _component_versions(given: list[str]) -> dict[str, str]:
    """``--component-version nixl=0.7.1`` values by component (a bad one: exit 2)."""
    from kvtool.audit.component_release import components
    from kvtool.errors import KvtoolError

    found = {}
    for value in given:
        name, sep, release = value.partition("=")
        name = name.strip().lower()
        if not sep or not release.strip():
            raise KvtoolError(f"--component-version: {value!r}: write NAME=RELEASE")
        if name not in components():
            raise KvtoolError(
                f"--component-version: unknown component {name!r}"
                f" (choose from {', '.join(components())})"
            )
        found[name] = release.strip()
    return found


def _baseline_path(given: Path | None, settings: "AuditSettings", updating: bool) -> Path | None:
    """The baseline file: ``--baseline``, else the ``baseline`` setting (relative to the
    settings file's directory)."""
    from kvtool.errors import KvtoolError

    if given is not None:
        return given
    if settings.baseline is not None:
        return settings.root / settings.baseline
    if updating:
        raise KvtoolError("--update-baseline: name the file with --baseline FILE")
    return None


def _read_live(
    url: str, header: list[str], paths: list[str], fixing: bool, out: "Output"
) -> "LiveServer":
    import os

    from kvtool.audit.live import read_live
    from kvtool.errors import KvtoolError
    from kvtool.http import request_headers
    from kvtool.termsafe import terminal_line

    if paths or fixing:
        raise KvtoolError("audit: --url audits a running server: no files, --fix or --diff")
    live = read_live(url, request_headers(header, os.environ))
    for note in live.invocation.notes:  # what was read, for a text report that omits notes
        out.chatter.print(
            terminal_line(f"kvtool: {note}"), markup=False, highlight=False, soft_wrap=True
        )
    return live


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


def register(app: typer.Typer) -> None:
    """Add ``audit`` to the root app."""
    app.command("audit", no_args_is_help=False)(audit)
