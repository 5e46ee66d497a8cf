"""``kvtool simulate``: replay a workload through the reference connector's drain policies."""

from pathlib import Path
from typing import Annotated

import typer

from kvtool.output.completion import complete_model
from kvtool.output.options import (
    ColorMode,
    ColorOption,
    OutputFileOption,
    OutputFormatOption,
    QuietOption,
    TextOrJson,
)

_POLICIES = ("eager", "fifo", "eviction_aware")
# Options of the built-in prefix-repetition workload (used when no --trace is given):
# flag -> (prefix_repetition() argument, default named in the help text).
_WORKLOAD_OPTIONS = {
    "--num-prefixes": ("num_prefixes", 16),
    "--prefix-len": ("prefix_tokens", 512),
    "--suffix-len": ("suffix_tokens", 64),
    "--output-len": ("output_tokens", 16),
    "--num-requests": ("num_requests", 200),
    "--seed": ("seed", 0),
}


def _knobs(pairs: list[str]) -> dict[str, list[str]]:
    from kvtool.errors import KvtoolError

    knobs: dict[str, list[str]] = {}
    for pair in pairs:
        key, sep, values = pair.partition("=")
        if not sep or not key.startswith("kvtool.") or not values:
            raise KvtoolError(f"--set {pair!r}: expected kvtool.KEY=V1[,V2...]")
        knobs[key] = [v.strip() for v in values.split(",") if v.strip()]
    return knobs


def _block_bytes(model: str, block_size: int) -> int:
    from kvtool.sizing.deployment import make_deployment
    from kvtool.sizing.model_spec import load_model_spec
    from kvtool.sizing.report import compute

    report = compute(load_model_spec(model), make_deployment(block_size=block_size))
    return int(report.bytes_per_block)


def simulate(
    trace: Annotated[Path | None, typer.Option(help="JSONL trace (see kvtool.simulate).")] = None,
    num_prefixes: Annotated[
        int | None, typer.Option(help="Prefix repetition: shared prefixes (default 16).")
    ] = None,
    prefix_len: Annotated[
        int | None, typer.Option(help="Prefix repetition: prefix tokens (default 512).")
    ] = None,
    suffix_len: Annotated[
        int | None, typer.Option(help="Prefix repetition: suffix tokens (default 64).")
    ] = None,
    output_len: Annotated[
        int | None, typer.Option(help="Prefix repetition: output tokens (default 16).")
    ] = None,
    num_requests: Annotated[
        int | None, typer.Option(help="Prefix repetition: requests (default 200).")
    ] = None,
    seed: Annotated[
        int | None, typer.Option(help="Prefix repetition: random seed (default 0).")
    ] = None,
    gpu_blocks: Annotated[int, typer.Option(help="GPU KV blocks (vLLM's num_gpu_blocks).")] = 256,
    block_size: Annotated[int, typer.Option(help="Tokens per block.")] = 16,
    max_num_seqs: Annotated[int, typer.Option(help="Concurrent requests.")] = 8,
    max_batched_tokens: Annotated[int, typer.Option(help="Tokens per step.")] = 2048,
    host_blocks: Annotated[int, typer.Option(help="Host store size in blocks.")] = 4096,
    model: Annotated[
        str,
        typer.Option(
            help="Model for block bytes (catalog name or config.json).",
            autocompletion=complete_model,
        ),
    ] = "llama-3.1-8b",
    block_bytes: Annotated[
        int | None, typer.Option(help="Bytes per block (default: from --model).")
    ] = None,
    policy: Annotated[
        list[str] | None, typer.Option(help="eager, fifo, eviction_aware (repeat; default all).")
    ] = None,
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", help="Sweep a knob: kvtool.fifo.threshold=1,10,100 (repeat)."),
    ] = None,
    output_format: OutputFormatOption = TextOrJson.text,
    output_file: OutputFileOption = None,
    quiet: QuietOption = False,
    color: ColorOption = ColorMode.auto,
) -> None:
    """Blocks stored before eviction and bytes written, per drain policy and knob setting."""
    from pydantic import ValidationError

    from kvtool.connector.config import PolicyName
    from kvtool.errors import KvtoolError
    from kvtool.output.errors import bad_option, check_choice
    from kvtool.output.kinds import emit
    from kvtool.output.streams import Output
    from kvtool.simulate.engine import EngineSettings
    from kvtool.simulate.render import SIMULATE, Sweep
    from kvtool.simulate.sweep import settings_for, sweep
    from kvtool.simulate.workload import prefix_repetition, read_trace

    out = Output(output_file=output_file, quiet=quiet, color=color)
    for name in policy or ():
        check_choice("--policy", name, _POLICIES)
    policies = [PolicyName(p) for p in (policy or _POLICIES)]
    workload = {
        "--num-prefixes": num_prefixes,
        "--prefix-len": prefix_len,
        "--suffix-len": suffix_len,
        "--output-len": output_len,
        "--num-requests": num_requests,
        "--seed": seed,
    }
    given = {flag: value for flag, value in workload.items() if value is not None}
    if trace is not None:
        requests = read_trace(trace)
        if given:
            raise KvtoolError(
                f"{next(iter(given))} shapes the built-in prefix-repetition workload; "
                "it has no effect with --trace"
            )
    else:
        requests = prefix_repetition(**{
            argument: given.get(flag, default)
            for flag, (argument, default) in _WORKLOAD_OPTIONS.items()
        })
    try:
        engine = EngineSettings(
            num_gpu_blocks=gpu_blocks, block_size=block_size, max_num_seqs=max_num_seqs,
            max_batched_tokens=max_batched_tokens, host_blocks=host_blocks,
            block_bytes=block_bytes if block_bytes is not None else _block_bytes(model,
                                                                                 block_size),
        )
    except ValidationError as exc:
        first = exc.errors()[0]
        field = str(first["loc"][0]).replace("num_gpu_blocks", "gpu_blocks").replace("_", "-")
        raise bad_option(f"--{field}", first.get("input"), first["msg"]) from None
    configs = settings_for(policies, _knobs(set_ or []))
    with out.chatter.status("simulating") as status:
        results = sweep(
            requests, engine, configs,
            progress=lambda i, c: status.update(f"simulating {i + 1}/{len(configs)}: {c}"),
        )
    emit(SIMULATE, Sweep(engine, results), output_format.value, out)


def register(app: typer.Typer) -> None:
    """Add ``kvtool simulate`` to the root app."""
    app.command("simulate")(simulate)
