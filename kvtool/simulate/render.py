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
from kvtool.simulate.engine import EngineSettings, SimResult

SCHEMA_VERSION = 1
_GIB = 1 << 30


def _label(result: SimResult) -> str:
    config = dict(result.extra_config)
    policy = config.pop("kvtool.policy", "?")
    # kvtool.fifo.threshold -> threshold under the fifo policy; shared knobs keep their name.
    knobs = " ".join(
        f"{k.removeprefix(f'kvtool.{policy}.').removeprefix('kvtool.')}={v}"
        for k, v in config.items()
    )
    return f"{policy} {knobs}".strip()


@dataclass(frozen=True)
class Sweep:
    """A finished sweep: the engine it ran on and one result per setting."""

    engine: EngineSettings
    results: Sequence[SimResult]


class SimRun(SimResult):
    """One run as the JSON document shows it: the result plus its label."""

    setting: str


class SimulationDocument(BaseModel):
    engine: EngineSettings
    runs: list[SimRun]


def results_json(engine: EngineSettings, results: Sequence[SimResult]) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "engine": engine.model_dump(),
        "runs": [
            {**r.model_dump(), "setting": _label(r)}
            for r in results
        ],
    }


def render_text(sweep: Sweep, console: Console) -> None:
    engine = sweep.engine
    console.print(
        f"[bold]drain policies: {engine.num_gpu_blocks} GPU blocks of {engine.block_size} "
        f"tokens, host store {engine.host_blocks} blocks[/bold]",
        soft_wrap=True,
    )
    table = Table()
    for column in ("setting", "blocks stored", "GiB written", "lost to eviction",
                   "external hit rate", "GPU hit rate"):
        if column == "setting":
            table.add_column(column, no_wrap=True)
        else:
            table.add_column(column, justify="right")
    for r in sweep.results:
        gpu_rate = r.gpu_hit_tokens / r.prompt_tokens if r.prompt_tokens else 0.0
        table.add_row(escape(_label(r)), f"{r.blocks_stored:,}", f"{r.bytes_stored / _GIB:.2f}",
                      f"{r.blocks_lost_to_eviction:,}", f"{r.external_hit_rate:.1%}",
                      f"{gpu_rate:.1%}")
    console.print(table)


SIMULATE: ReportKind[Sweep] = ReportKind(
    name="simulate",
    title="kvtool simulate JSON report",
    schema_version=SCHEMA_VERSION,
    text=render_text,
    document=lambda sweep: results_json(sweep.engine, sweep.results),
    schema=lambda: SimulationDocument.model_json_schema(mode="serialization"),
)
