"""The verification report as text or JSON (see :mod:`kvtool.output`)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from kvtool.output.kinds import ReportKind
from kvtool.termsafe import terminal_line
from kvtool.verify.diagnose import VerifyReport

_HEADLINE = {
    "serving-hits": "[green]the offload tier is serving hits[/green]",
    "no-external-hits": "[red]the offload tier served no hits[/red]",
    "no-traffic": "[yellow]no traffic between the scrapes[/yellow]",
}


def _pct(rate: float | None) -> str:
    return "-" if rate is None else f"{rate:.1%}"


def render_text(report: VerifyReport, console: Console) -> None:
    d = report.deltas
    console.print("[bold]counter deltas between the scrapes[/bold]")
    table = Table()
    table.add_column("counter")
    table.add_column("delta", justify="right")
    for label, value in (
        ("requests finished", d.requests),
        ("prefix-cache queries (tokens)", d.prefix_queries),
        ("prefix-cache hits (tokens)", d.prefix_hits),
        ("external prefix-cache queries (tokens)", d.external_queries),
        ("external prefix-cache hits (tokens)", d.external_hits),
        ("offload store bytes (GPU -> tier)", d.offload_store_bytes),
        ("offload load bytes (tier -> GPU)", d.offload_load_bytes),
        ("offload allocation failures", d.offload_allocation_failures),
    ):
        table.add_row(label, f"{value:,.0f}")
    console.print(table)
    console.print(
        f"GPU prefix hit rate {_pct(report.prefix_hit_rate)}, "
        f"external hit rate {_pct(report.external_hit_rate)}"
        # The connector's name is captured from the engine's log: input, shown escaped.
        + (f", connector {terminal_line(report.connector)}" if report.connector else ""),
        markup=False,
        soft_wrap=True,
    )
    console.print(_HEADLINE[report.verdict])
    for number, cause in enumerate(report.causes, start=1):
        console.print(
            f"  {number}. {cause.code}: {terminal_line(cause.message)}",
            markup=False,
            soft_wrap=True,
        )
    for note in report.notes:
        console.print(f"  note: {terminal_line(note)}", markup=False, soft_wrap=True)


def _document(report: VerifyReport) -> dict[str, Any]:
    data: dict[str, Any] = report.model_dump(mode="json")
    return data


VERIFY: ReportKind[VerifyReport] = ReportKind(
    name="verify",
    title="kvtool verify JSON report",
    schema_version=1,
    text=render_text,
    document=_document,
    schema=lambda: VerifyReport.model_json_schema(mode="serialization"),
)
