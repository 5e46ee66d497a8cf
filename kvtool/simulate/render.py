"""Output of a simulation sweep: a rich table or one JSON document (see :mod:`kvtool.output`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from kvtool.output.kinds import ReportKind
from kvtool.simulate.advice import (
    Recommendation,
    byte_size,
    explain,
    no_recommendation_reason,
    recommend,
    setting_label,
)
from kvtool.simulate.engine import EngineSettings, SimResult

SCHEMA_VERSION = 2
_GIB = 1 << 30


@dataclass(frozen=True)
class Sweep:
    """A finished sweep: the workload, the engine it ran on and one result per setting."""

    workload: str
    engine: EngineSettings
    results: Sequence[SimResult]


class SimRun(SimResult):
    """One run as the JSON document shows it: the result, its label and what it means."""

    setting: str
    notes: list[str]


class SimulationDocument(BaseModel):
    workload: str
    engine: EngineSettings
    runs: list[SimRun]
    recommendation: Recommendation | None
    recommendation_note: str | None
    """Why there is no recommendation, when there is none."""


def results_json(sweep: Sweep) -> dict[str, Any]:
    chosen = recommend(sweep.results)
    return {
        "schema_version": SCHEMA_VERSION,
        "workload": sweep.workload,
        "engine": sweep.engine.model_dump(),
        "runs": [
            {**r.model_dump(), "setting": setting_label(r.extra_config), "notes": explain(r)}
            for r in sweep.results
        ],
        "recommendation": chosen.model_dump() if chosen is not None else None,
        "recommendation_note": None if chosen is not None
        else no_recommendation_reason(sweep.results),
    }


def render_text(sweep: Sweep, console: Console) -> None:
    engine = sweep.engine
    host_gib = engine.host_blocks * engine.block_bytes / _GIB
    console.print(
        f"[bold]drain policies on {escape(sweep.workload)}: {engine.num_gpu_blocks} GPU blocks of "
        f"{engine.block_size} tokens, host store {engine.host_blocks} blocks "
        f"({host_gib:.2f} GiB)[/bold]",
        soft_wrap=True,
    )
    table = Table()
    table.add_column("setting", no_wrap=True)
    for column in ("host hit rate", "GPU hit rate", "GiB written", "blocks stored",
                   "lost to recycling", "preemptions"):
        table.add_column(column, justify="right")
    for r in sweep.results:
        table.add_row(escape(setting_label(r.extra_config)), f"{r.external_hit_rate:.1%}",
                      f"{r.gpu_hit_rate:.1%}", f"{r.bytes_stored / _GIB:.3f}",
                      f"{r.blocks_stored:,}", f"{r.lost_to_recycling:,}",
                      f"{r.preemptions:,}")
    console.print(table)
    for r in sweep.results:
        for note in explain(r):
            console.print(f"  {escape(setting_label(r.extra_config))}: {escape(note)}",
                          soft_wrap=True)
    chosen = recommend(sweep.results)
    if chosen is None:
        reason = no_recommendation_reason(sweep.results)
        console.print(f"[bold]recommendation:[/bold] {escape(reason)}", soft_wrap=True)
        return
    console.print(
        f"[bold]recommendation: {escape(chosen.setting)}[/bold]: host hits "
        f"{chosen.external_hit_rate:.1%}, {byte_size(chosen.bytes_stored)} written; "
        f"{escape(chosen.reason)}",
        soft_wrap=True,
    )


SIMULATE: ReportKind[Sweep] = ReportKind(
    name="simulate",
    title="kvtool simulate JSON report",
    schema_version=SCHEMA_VERSION,
    text=render_text,
    document=results_json,
    schema=lambda: SimulationDocument.model_json_schema(mode="serialization"),
)
