"""CLI registration for ``kvtool size`` (parse options, call the library, render)."""

from enum import Enum
from typing import Annotated

import typer

from kvtool.output.completion import complete_model, complete_version
from kvtool.output.options import (
    ColorMode,
    ColorOption,
    OutputFileOption,
    OutputFormatOption,
    QuietOption,
    TextOrJson,
)


class Emit(str, Enum):
    flags = "flags"
    env = "env"


def register(app: typer.Typer) -> None:
    """Add ``kvtool size`` to the root app."""

    @app.command("size")
    def size(
        model: Annotated[
            str,
            typer.Option(
                "--model",
                "-m",
                help="config.json, model directory, or catalog name.",
                autocompletion=complete_model,
            ),
        ],
        tp: Annotated[int, typer.Option("--tp", help="Tensor-parallel size.")] = 1,
        pp: Annotated[int, typer.Option("--pp", help="Pipeline-parallel size.")] = 1,
        dcp: Annotated[int, typer.Option("--dcp", help="Decode-context-parallel size.")] = 1,
        kv_cache_dtype: Annotated[
            str, typer.Option("--kv-cache-dtype", help="auto, bfloat16, float16, fp8, ...")
        ] = "auto",
        dtype: Annotated[
            str | None, typer.Option("--dtype", help="Model dtype (default: the config's).")
        ] = None,
        mamba_ssm_dtype: Annotated[
            str | None,
            typer.Option("--mamba-ssm-dtype", help="SSM state dtype (default: model dtype)."),
        ] = None,
        block_size: Annotated[
            int | None,
            typer.Option("--block-size", help="vLLM --block-size when pinned (default: vLLM's)."),
        ] = None,
        gpu: Annotated[
            str,
            typer.Option("--gpu", help="GPU (h100, h200, b200, ...): picks vLLM's backend."),
        ] = "h200",
        attention_backend: Annotated[
            str | None,
            typer.Option("--attention-backend", help="vLLM attention backend (default: vLLM's)."),
        ] = None,
        vllm_version: Annotated[
            str | None,
            typer.Option(
                "--vllm-version",
                help="Release whose model registry must serve the model (default: newest).",
                autocompletion=complete_version,
            ),
        ] = None,
        context_len: Annotated[
            int | None,
            typer.Option("--context-len", help="Tokens per request (default: model max)."),
        ] = None,
        sessions: Annotated[
            int | None, typer.Option("--sessions", help="Concurrent sessions to hold.")
        ] = None,
        host_ram_gib: Annotated[
            float | None,
            typer.Option("--host-ram-gib", help="Available host RAM (psutil total - used)."),
        ] = None,
        utilization: Annotated[
            float | None,
            typer.Option("--utilization", help="Share of host RAM for the CPU tier (KAITO)."),
        ] = None,
        cpu_tier_gib: Annotated[
            float | None,
            typer.Option("--cpu-tier-gib", help="Intended CPU tier, GiB, total across ranks."),
        ] = None,
        gpu_kv_gib: Annotated[
            float | None,
            typer.Option("--gpu-kv-gib", help="GPU KV memory per rank (vLLM log), GiB."),
        ] = None,
        num_gpu_blocks: Annotated[
            int | None, typer.Option("--num-gpu-blocks", help="GPU blocks (vLLM log).")
        ] = None,
        prefix_len: Annotated[
            int | None,
            typer.Option("--prefix-len", help="Benchmark prefix length (default: context)."),
        ] = None,
        lmcache_chunk_size: Annotated[
            int | None, typer.Option("--lmcache-chunk-size", help="LMCache chunk tokens.")
        ] = None,
        pcie_gbps: Annotated[
            float | None,
            typer.Option("--pcie-gbps", help="Effective host-to-GPU GB/s per GPU."),
        ] = None,
        nvme_gbps: Annotated[
            float | None, typer.Option("--nvme-gbps", help="NVMe read GB/s (all drives).")
        ] = None,
        prefill_tok_s: Annotated[
            float | None,
            typer.Option("--prefill-tok-s", help="Prefill throughput for re-prefill time."),
        ] = None,
        no_mla_dedup: Annotated[
            bool,
            typer.Option("--no-mla-dedup", help="Native offload stores MLA once per rank."),
        ] = False,
        max_num_batched_tokens: Annotated[
            int | None,
            typer.Option(
                "--max-num-batched-tokens",
                help="vLLM --max-num-batched-tokens (default: vLLM's for --gpu).",
            ),
        ] = None,
        max_num_seqs: Annotated[
            int | None,
            typer.Option("--max-num-seqs", help="vLLM --max-num-seqs (default: vLLM's for --gpu)."),
        ] = None,
        async_scheduling: Annotated[
            bool | None,
            typer.Option(
                "--async-scheduling/--no-async-scheduling",
                help="vLLM async scheduling (default: vLLM's: on unless --pp > 1).",
                show_default=False,
            ),
        ] = None,
        kv_connector: Annotated[
            str,
            typer.Option(
                "--kv-connector",
                help="KV connector vLLM runs (its SupportsHMA decides HMA); 'none' for none.",
            ),
        ] = "OffloadingConnector",
        disable_hma: Annotated[
            bool | None,
            typer.Option(
                "--disable-hybrid-kv-cache-manager/--no-disable-hybrid-kv-cache-manager",
                help="vLLM's flag (default: vLLM decides).",
                show_default=False,
            ),
        ] = None,
        env: Annotated[
            list[str] | None,
            typer.Option("--env", help="The deployment's env var NAME=VALUE (repeatable)."),
        ] = None,
        vllm_python: Annotated[
            str | None,
            typer.Option(
                "--vllm-python",
                help="A python with vLLM: compute the figures with its own code (no GPU).",
            ),
        ] = None,
        emit: Annotated[
            Emit | None, typer.Option("--emit", help="Print lines to paste: flags or env.")
        ] = None,
        output_format: OutputFormatOption = TextOrJson.text,
        output_file: OutputFileOption = None,
        quiet: QuietOption = False,
        color: ColorOption = ColorMode.auto,
        explain: Annotated[
            bool, typer.Option("--explain", help="Show the arithmetic line by line.")
        ] = False,
    ) -> None:
        """KV-cache bytes per token and offload tier sizes, with the arithmetic shown."""
        from kvtool.output.kinds import emit as emit_report
        from kvtool.output.streams import Output
        from kvtool.releases import resolve_target
        from kvtool.sizing.deployment import make_deployment, parse_env
        from kvtool.sizing.model_spec import load_model_spec
        from kvtool.sizing.render import SIZE, SizingView, emit_lines
        from kvtool.sizing.report import compute

        deployment = make_deployment(
            tp=tp,
            pp=pp,
            dcp=dcp,
            dtype=dtype,
            kv_cache_dtype=kv_cache_dtype,
            mamba_ssm_dtype=mamba_ssm_dtype,
            block_size=block_size,
            context_len=context_len,
            sessions=sessions,
            host_ram_gib=host_ram_gib,
            utilization=utilization,
            cpu_tier_gib=cpu_tier_gib,
            gpu_kv_gib=gpu_kv_gib,
            num_gpu_blocks=num_gpu_blocks,
            prefix_len=prefix_len,
            lmcache_chunk_size=lmcache_chunk_size,
            pcie_gbps=pcie_gbps,
            nvme_gbps=nvme_gbps,
            prefill_tok_s=prefill_tok_s,
            mla_dedup=not no_mla_dedup,
            gpu=gpu,
            attention_backend=attention_backend,
            max_num_batched_tokens=max_num_batched_tokens,
            max_num_seqs=max_num_seqs,
            async_scheduling=async_scheduling,
            kv_connector=None if kv_connector.lower() == "none" else kv_connector,
            disable_hybrid_kv_cache_manager=disable_hma,
            env=parse_env(env or []),
            vllm_version=resolve_target(vllm_version, None).version,
        )
        spec = load_model_spec(model, release=deployment.vllm_version)
        report = compute(spec, deployment)
        out = Output(output_file=output_file, quiet=quiet, color=color)
        if vllm_python is not None:
            from kvtool.models.source import find_model_config
            from kvtool.sizing.vllm_run import size_with_vllm

            found = find_model_config(model)
            assert found is not None  # load_model_spec found it above
            report = size_with_vllm(vllm_python, dict(found.raw), report, deployment)
        if emit is not None:
            out.write("".join(line + "\n" for line in emit_lines(report, emit.value)))
            return
        emit_report(SIZE, SizingView(report, explain), output_format.value, out)
