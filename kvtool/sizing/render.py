"""Render a :class:`SizingReport`: a rich table, the arithmetic, JSON, paste-ready lines.

The report (text or JSON) and ``--emit`` lines go to stdout or ``-o``; see
:mod:`kvtool.output`. Rendering never computes a figure: everything comes from the report.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from kvtool.errors import KvtoolError
from kvtool.output.kinds import ReportKind
from kvtool.sizing import arithmetic as ar
from kvtool.sizing.facts import sizing_facts
from kvtool.sizing.results import SizingReport
from kvtool.termsafe import terminal_line


def flag_gib(value: float) -> str:
    """A GiB size for a flag, rounded *up* to 0.01 GiB, without trailing zeros."""
    return f"{ar.round_up_gib(value, 2):.2f}".rstrip("0").rstrip(".")


def _bytes(value: float | None) -> str:
    if value is None:
        return "-"
    text = f"{value:,.0f}" if float(value).is_integer() else f"{value:,.1f}"
    for shift, unit in ((30, "GiB"), (20, "MiB"), (10, "KiB")):
        if value >= 1 << shift:
            return f"{text}  ({value / (1 << shift):.4g} {unit})"
    return text


def _count(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g} s"


def _gib(value: float | None) -> str:
    return "-" if value is None else f"{value:.6g} GiB"


def _bench_range(r: SizingReport) -> str:
    if r.bench_num_prefixes_min is None:
        return "-"
    return f"{r.bench_num_prefixes_min}..{r.bench_num_prefixes_max} at prefix {r.bench_prefix_len}"


def _groups(r: SizingReport) -> str:
    return ", ".join(
        f"{g.kind} x{g.layers}"
        + (f" block {g.block_size}" if g.block_size != r.block_size else "")
        + (
            " (" + " + ".join(f"{p.layers} x {p.page_bytes:,} B" for p in g.layer_pages) + ")"
            if g.layer_pages
            else ""
        )
        for g in r.kv_cache_groups
    )


def render_text(report: SizingReport, console: Console, explain: bool) -> None:
    """The table, then warnings and assumptions; ``explain`` adds the arithmetic."""
    r = report
    title = (
        f"{r.model} ({r.architecture}, {r.architecture_class}) - tp {r.tp}, pp {r.pp}, "
        f"dcp {r.dcp}, kv {r.kv_cache_dtype_resolved} ({r.kv_dtype_bytes} B), "
        f"block {r.block_size}, {r.gpu} {r.attention_backend}"
    )
    # The title is its own line: a table title wraps at the table's width.
    console.print(f"[bold]{escape(terminal_line(title))}[/bold]", soft_wrap=True)
    table = Table(show_header=True, header_style="bold")
    table.add_column("figure")
    table.add_column("value", justify="right")
    rows: list[tuple[str, str] | None] = [
        ("KV bytes/token, whole model", _bytes(r.kv_bytes_per_token)),
        ("KV bytes/token per rank", _bytes(r.kv_bytes_per_token_per_rank)),
        (
            f"KV bytes/token, all ranks (x{r.kv_replication_factor:g})",
            _bytes(r.kv_bytes_per_token_all_ranks),
        ),
        (
            f"hybrid KV cache manager (vLLM {r.vllm_release})",
            "on" if r.hma_enabled else "off",
        ),
        (f"KV cache groups ({len(r.kv_cache_groups)})", _groups(r)),
        ("bytes per block per rank (vLLM's pool block)", _bytes(r.bytes_per_block)),
        ("GPU blocks (as vLLM logs num_gpu_blocks)", _count(r.num_gpu_blocks)),
    ]
    if r.kv_bytes_per_token_full_attention_only != r.kv_bytes_per_token:
        full_only = _bytes(r.kv_bytes_per_token_full_attention_only)
        rows.append(("KV bytes/token, full-attention layers only", full_only))
    if r.state_bytes_per_sequence:
        rows += [
            ("state page per layer per rank, padded", _bytes(r.state_page_padded_bytes)),
            ("recurrent state per sequence, all ranks", _bytes(r.state_bytes_per_sequence)),
            ("amortised bytes/token per rank", _bytes(r.amortised_bytes_per_token_per_rank)),
        ]
    rows += [
        None,
        (f"request at {_count(r.context_len)} tokens, per rank", _bytes(r.request_bytes_per_rank)),
        ("request, stored in a native CPU tier", _bytes(r.request_bytes_stored)),
    ]
    if r.gpu_resident_request_bytes_per_rank != r.request_bytes_per_rank:
        rows.append(
            ("request, GPU-resident per rank (HMA)", _bytes(r.gpu_resident_request_bytes_per_rank))
        )
    rows += [
        None,
        ("--kv-offloading-size (TP total)", _gib(r.kv_offloading_size_gib)),
        ("  from", r.cpu_tier_basis or "pass --cpu-tier-gib, --host-ram-gib or --sessions"),
        ("  native chunk (per block hash and group)", _bytes(r.native_chunk_bytes)),
        ("  tokens per chunk, per group", " / ".join(map(str, r.native_tokens_per_chunk))),
        ("  native chunks", _count(r.native_chunks)),
        ("  CPU tier tokens", _count(r.cpu_tier_tokens)),
        ("  sessions at the context length", _count(r.cpu_tier_sessions)),
        ("per-rank equivalent (SGLang)", _gib(r.per_rank_gib)),
        (
            "LMCACHE_MAX_LOCAL_CPU_SIZE (in-process, per rank)",
            _gib(r.lmcache_max_local_cpu_size_gib),
        ),
        None,
        ("LMCache L1, KAITO formula", _gib(r.l1_capacity_gib)),
        ("  tokens", _count(r.lmcache_tokens_at_l1_capacity)),
        ("LMCache L1, whole budget", _gib(r.l1_whole_budget_gib)),
        ("  tokens", _count(r.lmcache_tokens_at_whole_budget)),
        ("  resident below the eviction watermark", _count(r.lmcache_resident_tokens_at_watermark)),
        None,
        ("GPU tier tokens (vLLM's GPU KV cache size)", _count(r.gpu_tier_tokens)),
        (
            f"Maximum concurrency for {_count(r.context_len)} tokens per request",
            "-" if r.max_concurrency is None else f"{r.max_concurrency:.2f}x",
        ),
        (
            "  tokens in flight",
            f"{r.max_in_flight_tokens:,} ({'async, ' if r.async_scheduling else ''}"
            f"--max-num-batched-tokens {r.max_num_batched_tokens:,})",
        ),
        ("bench prefix_repetition num_prefixes", _bench_range(r)),
        None,
        (f"load from DRAM at {r.pcie_gbps:.3g} GB/s per GPU", _seconds(r.load_seconds_dram)),
        (f"load from NVMe at {r.nvme_gbps:g} GB/s", _seconds(r.load_seconds_nvme)),
        (
            "re-prefill",
            _seconds(r.load_seconds_reprefill) if r.prefill_tok_s else "- (pass --prefill-tok-s)",
        ),
    ]
    for row in rows:
        if row is None:
            table.add_section()
        else:
            table.add_row(*row)
    console.print(table)
    console.print(f"block size {r.block_size}: {escape(r.block_size_reason)}", soft_wrap=True)
    console.print(
        f"hybrid KV cache manager {'on' if r.hma_enabled else 'off'}: {escape(r.hma_reason)}",
        soft_wrap=True,
    )
    if explain:
        console.print("[bold]Arithmetic[/bold]")
        for line in r.explain:
            console.print(
                f"  {escape(line.label)}: {escape(line.formula)} = "
                f"[bold]{escape(line.value)}[/bold]",
                soft_wrap=True,
            )
    for w in r.warnings:
        console.print(
            f"[yellow]warning[/yellow] {escape(f'[{w.code}]')} {escape(w.message)}", soft_wrap=True
        )
    for note in r.assumptions:
        console.print(f"[dim]assumed: {escape(terminal_line(note))}[/dim]", soft_wrap=True)


@dataclass(frozen=True)
class SizingView:
    """A report as ``kvtool size`` shows it: with the arithmetic under ``--explain``."""

    report: SizingReport
    explain: bool


def _document(view: SizingView) -> dict[str, Any]:
    data: dict[str, Any] = view.report.model_dump(mode="json")
    if not view.explain:
        data.pop("explain")
    return data


def _schema() -> dict[str, Any]:
    schema = SizingReport.model_json_schema(mode="serialization")
    # The arithmetic lines appear only under --explain.
    schema["required"] = [name for name in schema.get("required", []) if name != "explain"]
    return schema


SIZE: ReportKind[SizingView] = ReportKind(
    name="size",
    title="kvtool size JSON report",
    # 2: bytes_per_block is vLLM's pool block; HMA, scheduler, concurrency, chunk fields
    schema_version=2,
    text=lambda view, console: render_text(view.report, console, view.explain),
    document=_document,
    schema=_schema,
)


def emit_lines(report: SizingReport, what: str) -> list[str]:
    """Lines to paste: ``flags`` (vLLM flag, LMCache MP server) or ``env`` (in-process LMCache)."""
    if report.kv_offloading_size_gib is None:
        raise KvtoolError(
            f"--emit {what} needs a CPU tier: pass --cpu-tier-gib, --host-ram-gib or --sessions"
        )
    facts = sizing_facts()
    if what == "flags":
        # One MP server holds every rank's shard: its L1 is the whole TP-wide budget.
        size = flag_gib(report.kv_offloading_size_gib)
        return [
            "# vLLM (vllm serve), native CPU offload:",
            f"--kv-offloading-size {size}",
            "# LMCache MP server (with --kv-offloading-backend lmcache):",
            f"lmcache server --chunk-size {report.lmcache_chunk_size} --l1-use-lazy "
            f"--l1-init-size-gb {facts.lmcache_l1_init_size_gb} --l1-size-gb {size} "
            "--eviction-policy LRU",
        ]
    assert report.lmcache_max_local_cpu_size_gib is not None
    return [
        "# LMCache in-process (LMCacheConnectorV1), per rank:",
        f"LMCACHE_CHUNK_SIZE={report.lmcache_chunk_size}",
        "LMCACHE_LOCAL_CPU=True",
        f"LMCACHE_MAX_LOCAL_CPU_SIZE={flag_gib(report.lmcache_max_local_cpu_size_gib)}",
    ]
