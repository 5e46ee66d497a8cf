"""``kvtool size --vllm-python PATH``: the figures by running that vLLM's own code.

The python at PATH runs ``vllm_probe.py`` (shipped beside this module) on the model's
config.json: vLLM's engine-start sizing path on an emulated GPU, no weights (see the
probe's docstring). Its figures replace kvtool's own in the report, which is then exact
for that installation by construction; every figure where kvtool's arithmetic gave
another number is named in a ``differs-from-vllm`` warning, and a vLLM refusal is the
command's error.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from kvtool.errors import KvtoolError
from kvtool.limits import MOST_GIB
from kvtool.sizing import arithmetic as ar
from kvtool.sizing.deployment import Deployment
from kvtool.sizing.results import SizingReport, SizingWarning

PROBE = Path(__file__).with_name("vllm_probe.py")
MARKER = "KVTOOL-VLLM-SIZING-JSON:"
PROBE_TIMEOUT_S = 900
GIB = 1 << 30


def _case(model_dir: Path, report: SizingReport, dep: Deployment) -> dict[str, Any]:
    case: dict[str, Any] = {
        "id": "model",
        "model_dir": str(model_dir),
        "gpu": dep.gpu.lower(),
        "tp": dep.tp,
        "kv_cache_dtype": dep.kv_cache_dtype,
        "dtype": dep.dtype,
        "block_size": dep.block_size,
        "max_model_len": report.context_len,
        "max_num_batched_tokens": dep.max_num_batched_tokens,
        "max_num_seqs": dep.max_num_seqs,
        "async_scheduling": dep.async_scheduling,
        "disable_hybrid_kv_cache_manager": dep.disable_hybrid_kv_cache_manager,
        "enable_prefix_caching": dep.prefix_caching,
        "num_gpu_blocks_override": dep.num_gpu_blocks,
        # with --num-gpu-blocks vLLM takes the override; the memory only has to hold it
        "kv_memory_bytes": round(dep.gpu_kv_gib * GIB) if dep.gpu_kv_gib is not None
        else MOST_GIB * GIB,
    }
    if dep.kv_connector == "OffloadingConnector" and report.kv_offloading_size_gib:
        case["kv_offloading_size"] = report.kv_offloading_size_gib
    elif dep.kv_connector is not None and dep.kv_connector != "OffloadingConnector":
        case["kv_transfer_config"] = {"kv_connector": dep.kv_connector, "kv_role": "kv_both"}
    return case


def _run(python: str, case: dict[str, Any], env: dict[str, str]) -> dict[str, Any]:
    import os

    run_env = {**os.environ, **env, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
               "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
    try:
        done = subprocess.run(
            [python, str(PROBE)], input=json.dumps([case]), capture_output=True, text=True,
            timeout=PROBE_TIMEOUT_S, env=run_env,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise KvtoolError(f"--vllm-python {python}: cannot run it ({exc})") from None
    line = next((x for x in reversed(done.stdout.splitlines()) if x.startswith(MARKER)), None)
    if done.returncode != 0 or line is None:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise KvtoolError(f"--vllm-python {python}: the vLLM run failed: {last}")
    result: dict[str, Any] = json.loads(line.removeprefix(MARKER))
    found: dict[str, Any] = result["model"]
    found["release"] = str(result.get("__vllm__", "?"))
    return found


def size_with_vllm(
    python: str, model_config: dict[str, Any], report: SizingReport, dep: Deployment
) -> SizingReport:
    """``report`` with vLLM's own figures, and a warning per figure kvtool computed otherwise."""
    if dep.gpu_kv_gib is None and dep.num_gpu_blocks is None:
        raise KvtoolError("--vllm-python needs --gpu-kv-gib or --num-gpu-blocks (vLLM sizes "
                          "its pool from the KV memory, which this run cannot profile)")
    if report.context_len is None:
        raise KvtoolError("--vllm-python needs --context-len (the config names no length)")
    with tempfile.TemporaryDirectory(prefix="kvtool-vllm-") as scratch:
        model_dir = Path(scratch)
        (model_dir / "config.json").write_text(json.dumps(model_config))
        theirs = _run(python, _case(model_dir, report, dep), dep.env)
    if "error" in theirs:
        raise KvtoolError(f"vLLM {theirs['release']} refuses this deployment: {theirs['error']}")
    offload = theirs.get("offload") or {}
    update: dict[str, Any] = {
        "hma_enabled": theirs["hma"],
        "block_size": theirs["block_size"],
        "bytes_per_block": theirs["pool_block_bytes"],
        "pool_block_bytes": theirs["pool_block_bytes"],
        "num_gpu_blocks": theirs["num_blocks"],
        "gpu_tier_tokens": theirs["gpu_kv_cache_tokens"],
        "max_concurrency": theirs["max_concurrency"],
        "max_num_batched_tokens": theirs["max_num_batched_tokens"],
        "max_num_seqs": theirs["max_num_seqs"],
        "async_scheduling": theirs["async_scheduling"],
        "max_in_flight_tokens": theirs["max_in_flight_tokens"],
        "vllm_release": theirs["release"],
    }
    if offload:
        per_chunk = tuple(
            g["tokens_per_block"] * offload["blocks_per_chunk"] for g in offload["groups"]
        )
        update |= {
            "native_chunk_bytes": offload["chunk_bytes"],
            "native_chunks": offload["num_chunks"],
            "native_tokens_per_chunk": per_chunk,
            "cpu_tier_tokens": ar.native_group_tokens(offload["num_chunks"], per_chunk),
        }
    differing = [
        SizingWarning(
            code="differs-from-vllm",
            message=f"{field}: kvtool computes {getattr(report, field)!r}, vLLM "
            f"{theirs['release']} at {python} computes {value!r} (shown)",
        )
        for field, value in update.items()
        if field != "vllm_release" and getattr(report, field) != value
    ]
    note = f"figures computed by vLLM {theirs['release']} ({python}) on an emulated {dep.gpu}"
    return report.model_copy(update={
        **update,
        "hma_reason": f"{report.hma_reason} (vLLM {theirs['release']}: "
        f"{'on' if theirs['hma'] else 'off'})",
        "warnings": (*report.warnings, *differing),
        "assumptions": (*report.assumptions, note),
    })
