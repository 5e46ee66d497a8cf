"""``kvtool simulate``: replay a workload through the reference connector's drain policies."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from kvtool.connector.policies import POLICY_NAMES
from kvtool.output.completion import complete_model
from kvtool.output.options import (
    ColorMode,
    ColorOption,
    OutputFileOption,
    OutputFormatOption,
    QuietOption,
    TextOrJson,
)
from kvtool.simulate.trace import WORKLOADS

DEFAULT_WORKLOAD = "prefix-repetition"
# The prefix-repetition flags kept from before --workload/--param: flag -> parameter.
_LEGACY_FLAGS = {
    "--num-prefixes": "num_prefixes",
    "--prefix-len": "prefix_tokens",
    "--suffix-len": "suffix_tokens",
    "--output-len": "output_tokens",
}
MAX_KNOB_VALUE_CHARS = 64


def _pairs(pairs: list[str], flag: str, *, prefix: str = "") -> dict[str, list[str]]:
    from kvtool.errors import KvtoolError

    out: dict[str, list[str]] = {}
    for pair in pairs:
        key, sep, values = pair.partition("=")
        if not sep or not key.startswith(prefix) or not values or len(key) > 128:
            example = "kvtool.KEY=V1[,V2...]" if prefix else "KEY=VALUE"
            raise KvtoolError(f"{flag} {pair[:80]!r}: expected {example}")
        items = [v.strip() for v in values.split(",") if v.strip()]
        long = next((v for v in items if len(v) > MAX_KNOB_VALUE_CHARS), None)
        if long is not None:
            raise KvtoolError(f"{flag} {key}: a value of {len(long)} characters "
                              f"(at most {MAX_KNOB_VALUE_CHARS})")
        out[key] = items
    return out


def _param_value(text: str) -> Any:
    """A --param value as JSON when it reads as a number or boolean, else the string."""
    import json
    import math

    try:
        value = json.loads(text)
    except ValueError:
        return text
    if isinstance(value, float) and not math.isfinite(value):
        return text  # refused by the parameter's own type, as text
    return value if isinstance(value, (int, float, bool)) else text


def _block_bytes(model: str, block_size: int) -> int:
    from kvtool.sizing.deployment import make_deployment
    from kvtool.sizing.model_spec import load_model_spec
    from kvtool.sizing.report import compute

    report = compute(load_model_spec(model), make_deployment(block_size=block_size))
    return int(report.bytes_per_block)


def simulate(
    trace: Annotated[
        Path | None, typer.Option(help="JSONL trace (docs/schemas/trace.schema.json).")] = None,
    workload: Annotated[
        str | None,
        typer.Option(help=f"Generated workload: {', '.join(WORKLOADS)} "
                          f"(default {DEFAULT_WORKLOAD}).")] = None,
    param: Annotated[
        list[str] | None,
        typer.Option(help="Workload parameter KEY=VALUE (repeat; see docs/simulate.md).")] = None,
    num_requests: Annotated[
        int | None, typer.Option(help="Generated workload: requests (default 200).")] = None,
    seed: Annotated[
        int | None, typer.Option(help="Generated workload: random seed (default 0).")] = None,
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
    num_gpu_blocks: Annotated[
        int | None, typer.Option("--num-gpu-blocks",
                                 help="GPU KV blocks, as vLLM logs them (default 256).")] = None,
    gpu_blocks: Annotated[int | None, typer.Option("--gpu-blocks", hidden=True)] = None,
    block_size: Annotated[int, typer.Option(help="Tokens per block.")] = 16,
    max_num_seqs: Annotated[int, typer.Option(help="vLLM --max-num-seqs.")] = 8,
    max_batched_tokens: Annotated[
        int, typer.Option(help="vLLM --max-num-batched-tokens.")] = 2048,
    host_blocks: Annotated[int, typer.Option(help="Host store size in blocks.")] = 4096,
    idle_stepping: Annotated[
        bool, typer.Option(help="Between arrivals the engine keeps stepping while the "
                                "connector holds work (a server); off: an offline driver.")
    ] = True,
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
        list[str] | None,
        typer.Option(help=f"{', '.join(POLICY_NAMES)} (repeat; default all).")] = None,
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", help="Sweep a knob: kvtool.fifo.threshold=1,10,100 (repeat)."),
    ] = None,
    plot: Annotated[
        Path | None, typer.Option(help="Also draw the sweep: FILE.svg, or FILE.png (matplotlib).")
    ] = None,
    jobs: Annotated[int, typer.Option(help="Settings run in parallel processes.")] = 1,
    output_format: OutputFormatOption = TextOrJson.text,
    output_file: OutputFileOption = None,
    quiet: QuietOption = False,
    color: ColorOption = ColorMode.auto,
) -> None:
    """Which drain policy and knobs to run: host hits, bytes written and blocks lost per
    setting, why a setting stores nothing, and a recommendation."""
    from pydantic import ValidationError

    from kvtool.errors import KvtoolError
    from kvtool.fsio import atomic_write, atomic_write_text, refuse_overwriting_inputs
    from kvtool.output.errors import bad_option, check_choice
    from kvtool.output.kinds import emit
    from kvtool.output.streams import Output
    from kvtool.simulate import plot as plotting
    from kvtool.simulate.engine import EngineSettings
    from kvtool.simulate.render import SIMULATE, Sweep
    from kvtool.simulate.sweep import (
        WorkloadSource,
        check_work,
        count_settings,
        settings_for,
        sweep,
    )
    from kvtool.simulate.trace import read_trace, workload_params

    out = Output(output_file=output_file, quiet=quiet, color=color)
    if gpu_blocks is not None:
        if num_gpu_blocks is not None:
            raise KvtoolError("--gpu-blocks is the old spelling of --num-gpu-blocks; give one")
        out.warnings.print("kvtool simulate: --gpu-blocks is deprecated; use --num-gpu-blocks "
                           "(as in kvtool size)", soft_wrap=True)
        num_gpu_blocks = gpu_blocks
    for name in policy or ():
        check_choice("--policy", name, POLICY_NAMES)
    if workload is not None:
        check_choice("--workload", workload, WORKLOADS)
    if jobs < 1 or jobs > 64:
        raise bad_option("--jobs", jobs, "use 1 to 64")
    for written, flag in ((plot, "--plot"), (output_file, "-o")):
        if written is not None and trace is not None:
            refuse_overwriting_inputs(written, [trace], flag)
    if plot is not None and output_file is not None:
        refuse_overwriting_inputs(plot, [output_file], "--plot")
    plot_kind = plotting.plot_format(plot) if plot is not None else None
    policies = list(policy or POLICY_NAMES)

    legacy = {flag: value for flag, value in zip(
        _LEGACY_FLAGS, (num_prefixes, prefix_len, suffix_len, output_len), strict=True)
        if value is not None}
    generated = {"--num-requests": num_requests, "--seed": seed,
                 "--workload": workload, "--param": param or None, **legacy}
    if trace is not None:
        requests = tuple(read_trace(trace).requests)
        given = next((flag for flag, value in generated.items() if value is not None), None)
        if given is not None:
            raise KvtoolError(f"{given} shapes a generated workload; it has no effect with "
                              "--trace")
        source = WorkloadSource(f"trace {trace}", requests=requests)
    else:
        name = workload or DEFAULT_WORKLOAD
        if legacy and name != "prefix-repetition":
            raise KvtoolError(f"{next(iter(legacy))} shapes the prefix-repetition workload; "
                              f"use --param with --workload {name}")
        given_params: dict[str, Any] = {
            key: _param_value(values[0]) if len(values) == 1 else ",".join(values)
            for key, values in _pairs(param or [], "--param").items()
        }
        given_params.update({_LEGACY_FLAGS[f]: v for f, v in legacy.items()})
        if num_requests is not None:
            given_params["num_requests"] = num_requests
        params = workload_params(name, given_params)
        source = WorkloadSource(name, generator=name, params=params, seed=seed or 0)

    try:
        engine = EngineSettings(
            num_gpu_blocks=num_gpu_blocks if num_gpu_blocks is not None else 256,
            block_size=block_size, max_num_seqs=max_num_seqs,
            max_batched_tokens=max_batched_tokens, host_blocks=host_blocks,
            idle_stepping=idle_stepping,
            block_bytes=block_bytes if block_bytes is not None else _block_bytes(model,
                                                                                 block_size),
        )
    except ValidationError as exc:
        first = exc.errors()[0]
        field = str(first["loc"][0]).replace("_", "-")
        raise bad_option(f"--{field}", first.get("input"), first["msg"]) from None
    knobs = _pairs(set_ or [], "--set", prefix="kvtool.")
    check_work(source, engine, count_settings(policies, knobs))  # before building any
    configs = settings_for(policies, knobs)
    with out.chatter.status("simulating") as status:
        results = sweep(
            source, engine, configs, jobs=jobs,
            progress=lambda i, c: status.update(f"simulating {i + 1}/{len(configs)}: {c}"),
        )
    report = Sweep(source.label, engine, results)
    emit(SIMULATE, report, output_format.value, out)
    if plot is not None:
        title = f"kvtool simulate: {source.label}"
        if plot_kind == "svg":
            atomic_write_text(plot, plotting.svg(results, title))
        else:
            atomic_write(plot, plotting.png(results, title))
        out.chatter.print(f"wrote {plot}", soft_wrap=True, highlight=False)


def register(app: typer.Typer) -> None:
    """Add ``kvtool simulate`` to the root app."""
    app.command("simulate")(simulate)
