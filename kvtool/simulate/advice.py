"""What a sweep means for the user: why a setting stores nothing, and which one to run.

The recommendation answers "for this workload and hardware, which policy and
knobs": the setting that writes the fewest bytes while keeping the best
baseline's host hits within :data:`HIT_TOLERANCE_POINTS` (the baseline is the
best eager run, eager being what lazy offload saves bytes against), with the
bytes it saves and the hits it costs.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel

from kvtool.connector.config import ConnectorConfig
from kvtool.connector.policies import EagerPolicy, FifoPolicy
from kvtool.simulate.engine import SimResult

HIT_TOLERANCE_POINTS = 0.2
"""Host-hit points a lazy setting may give up against eager and still be recommended."""
LOSS_WORTH_NOTING = 0.05
"""Share of buffered blocks lost to recycling above which a note says so."""
_GIB = 1 << 30


def setting_label(extra_config: dict[str, object]) -> str:
    config = dict(extra_config)
    policy = str(config.pop("kvtool.policy", "?"))
    # kvtool.fifo.threshold -> threshold under the fifo policy; shared knobs keep their name.
    knobs = " ".join(
        f"{k.removeprefix(f'kvtool.{policy}.').removeprefix('kvtool.')}={v}"
        for k, v in config.items()
    )
    return f"{policy} {knobs}".strip()


def byte_size(count: int) -> str:
    """Bytes in the largest binary unit that keeps them at 1 or more."""
    for unit, size in (("GiB", _GIB), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(count) >= size:
            return f"{count / size:.2f} {unit}"
    return f"{count} B"


def _pct(value: float) -> str:
    return f"{value:.1%}"


def explain(result: SimResult) -> list[str]:
    """Sentences saying why a setting stored little or nothing, or gained nothing from it."""
    stats = result.stats
    config = ConnectorConfig.from_extra_config(result.extra_config)
    notes: list[str] = []
    admitted, stored = stats["admitted"], stats["stored"]
    lost = stats["lost_to_recycling"]
    if stored == 0:
        if admitted == 0:
            if stats["skipped_duplicate"]:
                notes.append("stores nothing: every full prompt block was already buffered or "
                             "stored for another request")
            else:
                notes.append("stores nothing: no prompt fills a whole block (the adapter "
                             "stores only full prompt blocks)")
        elif lost:
            notes.append(f"stores nothing: vLLM recycled all {admitted:,} buffered blocks before "
                         "the policy released them")
        elif stats["dropped_store_full"]:
            notes.append("stores nothing: the host store was full of blocks being transferred")
    if (config.policy == FifoPolicy.name and admitted
            and not stats.get("released_by_threshold", 0)):
        if stored == 0:
            notes.append(
                f"stores nothing: FIFO waits until {config.fifo_threshold} finished requests "
                f"still buffer blocks, and vLLM recycled all {admitted:,} buffered blocks "
                "first; lower kvtool.fifo.threshold (e.g. --set kvtool.fifo.threshold=1,4,16) "
                "or use eviction_aware"
            )
        else:
            notes.append(
                f"FIFO's threshold ({config.fifo_threshold} finished requests still "
                "buffering) was never reached: what it stored it released only because vLLM "
                "was about to recycle it or the engine went idle; a lower "
                "kvtool.fifo.threshold stores earlier"
            )
    elif admitted and lost / admitted > LOSS_WORTH_NOTING:
        notes.append(f"lost {lost:,} of {admitted:,} buffered blocks ({lost / admitted:.0%}) to "
                     "recycling before release")
    if stored and result.external_hit_tokens == 0:
        notes.append(
            f"stored {stored:,} blocks but no request read one back: what recurred was still in "
            f"vLLM's GPU cache (GPU hits {_pct(result.gpu_hit_rate)}), or nothing recurred"
        )
    if stats["store_evictions"] and stored:
        notes.append(f"the host store evicted {stats['store_evictions']:,} blocks: a larger "
                     "--host-blocks keeps more")
    if result.preemptions:
        notes.append(f"vLLM preempted {result.preemptions:,} times: the GPU pool ran out of blocks "
                     "for running requests")
    if result.async_loads and result.load_wait_steps > result.async_loads:
        wait = result.load_wait_steps / result.async_loads
        notes.append(f"host hits waited {wait:.1f} steps on average for a running slot after "
                     "their load (kvtool.load_async=true); compare --set kvtool.load_async=false")
    return notes


class Recommendation(BaseModel):
    """The setting to run, against the baseline it was chosen over."""

    setting: str
    baseline: str
    external_hit_rate: float
    baseline_external_hit_rate: float
    hit_cost_points: float
    """Host-hit points given up against the baseline (negative: a gain)."""
    bytes_stored: int
    baseline_bytes_stored: int
    bytes_saved: int
    reason: str


def recommend(results: Sequence[SimResult]) -> Recommendation | None:
    """The setting to run (see the module docstring); None when no setting gets host hits."""
    hitting = [r for r in results if r.external_hit_tokens > 0]
    if not hitting:
        return None
    eager = [r for r in hitting if r.extra_config.get("kvtool.policy") == EagerPolicy.name]
    baseline = max(eager or hitting, key=lambda r: (r.external_hit_rate, -r.bytes_stored))
    floor = baseline.external_hit_rate - HIT_TOLERANCE_POINTS / 100
    keeping = [r for r in hitting if r.external_hit_rate >= floor - 1e-12]
    chosen = min(keeping, key=lambda r: (r.bytes_stored, -r.external_hit_rate))
    cost = (baseline.external_hit_rate - chosen.external_hit_rate) * 100
    saved = baseline.bytes_stored - chosen.bytes_stored
    if chosen is baseline:
        reason = ("no setting writes fewer bytes while keeping its host hits within "
                  f"{HIT_TOLERANCE_POINTS:g} points")
    else:
        share = saved / baseline.bytes_stored if baseline.bytes_stored else 0.0
        hits = ("the same host hits" if abs(cost) < 0.05 else
                f"{cost:.1f} fewer points of host hits" if cost > 0 else
                f"{-cost:.1f} more points of host hits")
        reason = (f"writes {byte_size(saved)} ({share:.1%}) less than "
                  f"{setting_label(baseline.extra_config)}, with {hits}")
    return Recommendation(
        setting=setting_label(chosen.extra_config),
        baseline=setting_label(baseline.extra_config),
        external_hit_rate=chosen.external_hit_rate,
        baseline_external_hit_rate=baseline.external_hit_rate,
        hit_cost_points=round(cost, 6),
        bytes_stored=chosen.bytes_stored,
        baseline_bytes_stored=baseline.bytes_stored,
        bytes_saved=saved,
        reason=reason,
    )


def no_recommendation_reason(results: Sequence[SimResult]) -> str:
    """Why :func:`recommend` found nothing to recommend."""
    if any(r.blocks_stored == 0 or r.lost_to_recycling for r in results):
        return ("none of these settings gets a host hit (see the notes): compare "
                "eviction_aware and eager, or lower kvtool.fifo.threshold")
    best_gpu = max((r.gpu_hit_rate for r in results), default=0.0)
    return ("no setting gets host hits on this workload: what recurs stays in vLLM's GPU "
            f"cache (GPU hits up to {_pct(best_gpu)}) or nothing recurs, so offload saves "
            "no prefill here")
