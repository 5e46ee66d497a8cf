"""The deployment side of a sizing question, validated once at construction.

Field names match the ``kvtool size`` flags (``tp`` is ``--tp``, ``host_ram_gib`` is
``--host-ram-gib``), so a validation error can name the flag the user typed.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any

import msgspec
from msgspec import Meta

from kvtool.errors import KvtoolError
from kvtool.limits import MOST_GIB
from kvtool.sizing.dtypes import KV_DTYPE_CHOICES, MODEL_DTYPE_BYTES

# The connector --kv-offloading-size makes by default (vLLM's native CPU offload).
NATIVE_CONNECTOR = "OffloadingConnector"


class Deployment(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Parallelism, cache and host/GPU budgets for one vLLM deployment.

    ``None`` means "not given": figures that need it are left out of the report rather
    than guessed, except where a documented default exists (block size, utilization,
    load-time assumptions), which the report then names.
    """

    tp: Annotated[int, Meta(ge=1)] = 1
    pp: Annotated[int, Meta(ge=1)] = 1
    dcp: Annotated[int, Meta(ge=1)] = 1
    dtype: str | None = None  # overrides the config's dtype (vLLM --dtype)
    kv_cache_dtype: str = "auto"
    mamba_ssm_dtype: str | None = None  # recurrent SSM state dtype; default the model dtype
    block_size: Annotated[int, Meta(ge=1)] | None = None
    context_len: Annotated[int, Meta(ge=1)] | None = None
    sessions: Annotated[int, Meta(ge=1)] | None = None
    # Available host RAM (psutil total - used).
    host_ram_gib: Annotated[float, Meta(gt=0, le=MOST_GIB)] | None = None
    utilization: Annotated[float, Meta(gt=0, le=1)] | None = None
    cpu_tier_gib: Annotated[float, Meta(gt=0, le=MOST_GIB)] | None = None
    gpu_kv_gib: Annotated[float, Meta(gt=0, le=MOST_GIB)] | None = None
    num_gpu_blocks: Annotated[int, Meta(ge=1)] | None = None
    prefix_len: Annotated[int, Meta(ge=1)] | None = None
    lmcache_chunk_size: Annotated[int, Meta(ge=1)] | None = None
    pcie_gbps: Annotated[float, Meta(gt=0)] | None = None
    nvme_gbps: Annotated[float, Meta(gt=0)] | None = None
    prefill_tok_s: Annotated[float, Meta(gt=0)] | None = None
    mla_dedup: bool = True  # native offload keeps one latent copy (CUDA, single node, TP only)
    gpu: str = "h200"  # decides vLLM's attention backend and so its kernel block size
    attention_backend: str | None = None  # vLLM --attention-backend; default: vLLM's pick
    # vLLM's scheduler inputs (None: vLLM's default for --gpu): sliding-window and chunked
    # groups reserve blocks for concurrent batches x max_num_batched_tokens in flight.
    max_num_batched_tokens: Annotated[int, Meta(ge=1)] | None = None
    max_num_seqs: Annotated[int, Meta(ge=1)] | None = None
    async_scheduling: bool | None = None
    prefix_caching: bool = True  # vLLM's default; hybrids then hold state blocks in align mode
    # The release whose rules decide (HMA, capacity formula); None: the newest tabled.
    vllm_version: str | None = None
    # The KV connector vLLM runs with: the one --kv-offloading-size makes by default; None
    # for no connector. Its SupportsHMA at the release decides HMA.
    kv_connector: str | None = NATIVE_CONNECTOR
    disable_hybrid_kv_cache_manager: bool | None = None  # None: vLLM decides
    env: dict[str, str] = msgspec.field(default_factory=dict)  # the deployment's vLLM env vars

    def __post_init__(self) -> None:
        # Checked on every construction (msgspec checks the Meta bounds only when it
        # converts): inf would pass "> 0" and then overflow the tiers' integer arithmetic.
        for name in self.__struct_fields__:
            value = getattr(self, name)
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"--{name.replace('_', '-')} {value!r}: expected a finite number")
        if self.tp % self.dcp:
            raise ValueError(f"--dcp {self.dcp} must divide --tp {self.tp}")
        if self.gpu_kv_gib is not None and self.num_gpu_blocks is not None:
            raise ValueError("--gpu-kv-gib and --num-gpu-blocks are alternatives; give one")
        if self.kv_cache_dtype not in KV_DTYPE_CHOICES:
            raise ValueError(
                f"--kv-cache-dtype {self.kv_cache_dtype!r} is not one of "
                f"{', '.join(KV_DTYPE_CHOICES)}"
            )
        for flag, value in (("--dtype", self.dtype), ("--mamba-ssm-dtype", self.mamba_ssm_dtype)):
            if value is not None and value not in MODEL_DTYPE_BYTES:
                raise ValueError(f"{flag} {value!r} is not one of {', '.join(MODEL_DTYPE_BYTES)}")
        from kvtool.sizing.backends import backend_table

        table = backend_table()
        if self.gpu.lower() not in table.gpus:
            raise ValueError(f"--gpu {self.gpu!r} is not one of {', '.join(table.gpus)}")
        if self.attention_backend is not None and (
            self.attention_backend.upper() not in table.backends
        ):
            raise ValueError(
                f"--attention-backend {self.attention_backend!r} is not one of "
                f"{', '.join(sorted(table.backends))}"
            )


def parse_env(pairs: list[str]) -> dict[str, str]:
    """``--env NAME=VALUE`` flags as a dict; one clear error for a malformed one."""
    env: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise KvtoolError(f"--env {pair!r}: expected NAME=VALUE")
        env[name] = value
    return env


def make_deployment(**values: Any) -> Deployment:
    """Build a :class:`Deployment`, turning validation errors into one-line CLI errors."""
    try:
        return msgspec.convert(values, Deployment)
    except msgspec.ValidationError as exc:
        message = str(exc)
        field = re.search(r" - at `\$\.(\w+)`$", message)
        if field is None:
            raise KvtoolError(message) from None
        name = field.group(1)
        why = message[: field.start()]
        raise KvtoolError(f"--{name.replace('_', '-')} {values.get(name)!r}: {why}") from None
