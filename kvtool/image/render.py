"""Render an :class:`InspectionReport` as text or JSON (see :mod:`kvtool.output`)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from kvtool.image.model import InspectionReport, StepOutcome, Verdict
from kvtool.output.kinds import ReportKind
from kvtool.termsafe import plain, terminal_text

VERDICT_STYLE = {
    Verdict.bundled: "bold green",
    Verdict.not_bundled: "bold red",
    Verdict.broken: "bold red",
    Verdict.unknown: "bold yellow",
}


def _document(report: InspectionReport) -> dict[str, Any]:
    data: dict[str, Any] = report.model_dump(mode="json")
    return data


def _step(outcome: StepOutcome) -> str:
    if outcome.status == "ran":
        return "ran"
    kind = f"{outcome.kind}: " if outcome.kind else ""
    return f"{outcome.status} ({kind}{outcome.reason})"


def _safe(text: str) -> Text:
    """Registry- and archive-derived text as inert console text: never parsed as markup,
    control characters made visible (a hostile registry must not drive the terminal)."""
    return Text(terminal_text(text))


def render_text(report: InspectionReport, console: Console) -> None:
    image = report.image
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    if image is not None:
        digest = image.manifest_digest or image.config_digest or ""
        cached = ", cached" if image.from_cache else ""
        grid.add_row("image", _safe(f"{image.reference} ({image.source}{cached})"))
        grid.add_row("platform", _safe(f"{image.platform}  config {image.config_platform}"))
        if image.available_platforms:
            grid.add_row("platforms", _safe(", ".join(image.available_platforms)))
        if digest:
            grid.add_row("digest", _safe(digest))
        if image.vllm_version:
            grid.add_row("vLLM", _safe(f"{image.vllm_version} (from {image.vllm_version_source})"))
        flag = image.build_flag
        where = f", history #{flag.deciding.index}" if flag.deciding else ""
        strong = ", installs kv_connectors" if flag.strong else ""
        grid.add_row(
            "build flag",
            _safe(f"INSTALL_KV_CONNECTORS={flag.value} ({flag.decided_by}{where}{strong})"),
        )
        if image.rate_limit is not None:
            limit = image.rate_limit
            grid.add_row(
                "rate limit",
                _safe(
                    f"remaining {limit.remaining} of {limit.limit}"
                    + (f" (source {limit.source})" if limit.source else "")
                ),
            )
    grid.add_row("build-flag step", _safe(_step(report.build_flag_step)))
    grid.add_row("runtime step", _safe(_step(report.runtime_step)))
    if report.probe is not None:
        torch = f", torch {report.probe.torch}" if report.probe.torch else ""
        grid.add_row("probe python", _safe(f"{report.probe.python}{torch}"))
    console.print(grid)
    for warning in [*(image.warnings if image else []), *report.warnings]:
        console.print(plain(("warning:", "yellow"), " ", warning), soft_wrap=True)
    table = Table(show_header=True, header_style="bold")
    table.add_column("connector")
    table.add_column("verdict")
    table.add_column("why")
    # A step that failed for every connector (the registry unreachable) is named once, on
    # its own line above; each verdict then points at it instead of repeating it.
    failed_steps = {
        f"{step.kind}: {step.reason}": name
        for name, step in (("build-flag", report.build_flag_step), ("runtime", report.runtime_step))
        if step.status == "failed" and step.kind
    }
    for verdict in report.verdicts:
        reason = verdict.reason
        if reason in failed_steps:
            reason = f"the {failed_steps[reason]} step failed (above)"
        why = reason + (f"\n{verdict.error}" if verdict.error else "")
        table.add_row(
            verdict.connector.value,
            f"[{VERDICT_STYLE[verdict.verdict]}]{verdict.verdict.value}[/]",
            _safe(why),
        )
    console.print(table)


INSPECT_IMAGE: ReportKind[InspectionReport] = ReportKind(
    name="inspect-image",
    title="kvtool inspect-image JSON report",
    schema_version=1,
    text=render_text,
    document=_document,
    schema=lambda: InspectionReport.model_json_schema(mode="serialization"),
)
