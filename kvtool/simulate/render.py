"""Output of a simulation sweep: a rich table on stderr, or one JSON object."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.table import Table

from kvtool.console import stderr
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


def results_json(engine: EngineSettings, results: Sequence[SimResult]) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "engine": engine.model_dump(),
        "runs": [
            {**r.model_dump(), "setting": _label(r), "external_hit_rate": r.external_hit_rate}
            for r in results
        ],
    }


def render_text(engine: EngineSettings, results: Sequence[SimResult]) -> None:
    table = Table(
        title=f"drain policies: {engine.num_gpu_blocks} GPU blocks of {engine.block_size} tokens, "
        f"host store {engine.host_blocks} blocks"
    )
    for column in ("setting", "blocks stored", "GiB written", "lost to eviction",
                   "external hit rate", "GPU hit rate"):
        if column == "setting":
            table.add_column(column, no_wrap=True)
        else:
            table.add_column(column, justify="right")
    for r in results:
        gpu_rate = r.gpu_hit_tokens / r.prompt_tokens if r.prompt_tokens else 0.0
        table.add_row(_label(r), f"{r.blocks_stored:,}", f"{r.bytes_stored / _GIB:.2f}",
                      f"{r.blocks_lost_to_eviction:,}", f"{r.external_hit_rate:.1%}",
                      f"{gpu_rate:.1%}")
    stderr.print(table)
