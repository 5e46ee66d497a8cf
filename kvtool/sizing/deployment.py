"""The deployment side of a sizing question, validated once at construction.

Field names match the ``kvtool size`` flags (``tp`` is ``--tp``, ``host_ram_gib`` is
``--host-ram-gib``), so a validation error can name the flag the user typed.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from kvtool.errors import KvtoolError
from kvtool.limits import MOST_GIB
from kvtool.sizing.dtypes import KV_DTYPE_CHOICES, MODEL_DTYPE_BYTES


class Deployment(BaseModel):
    """Parallelism, cache and host/GPU budgets for one vLLM deployment.

    ``None`` means "not given": figures that need it are left out of the report rather
    than guessed, except where a documented default exists (block size, utilization,
    load-time assumptions), which the report then names.
    """

    # inf would pass "> 0" and then overflow the integer arithmetic of the tiers.
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    tp: int = Field(default=1, ge=1)
    pp: int = Field(default=1, ge=1)
    dcp: int = Field(default=1, ge=1)
    dtype: str | None = None  # overrides the config's dtype (vLLM --dtype)
    kv_cache_dtype: str = "auto"
    mamba_ssm_dtype: str | None = None  # recurrent SSM state dtype; default the model dtype
    block_size: int | None = Field(default=None, ge=1)
    context_len: int | None = Field(default=None, ge=1)
    sessions: int | None = Field(default=None, ge=1)
    # Available host RAM (psutil total - used).
    host_ram_gib: float | None = Field(default=None, gt=0, le=MOST_GIB)
    utilization: float | None = Field(default=None, gt=0, le=1)
    cpu_tier_gib: float | None = Field(default=None, gt=0, le=MOST_GIB)
    gpu_kv_gib: float | None = Field(default=None, gt=0, le=MOST_GIB)
    num_gpu_blocks: int | None = Field(default=None, ge=1)
    prefix_len: int | None = Field(default=None, ge=1)
    lmcache_chunk_size: int | None = Field(default=None, ge=1)
    pcie_gbps: float | None = Field(default=None, gt=0)
    nvme_gbps: float | None = Field(default=None, gt=0)
    prefill_tok_s: float | None = Field(default=None, gt=0)
    mla_dedup: bool = True  # native offload keeps one latent copy (CUDA, single node, TP only)
    gpu: str = "h200"  # decides vLLM's attention backend and so its kernel block size
    attention_backend: str | None = None  # vLLM --attention-backend; default: vLLM's pick
    # vLLM's scheduler inputs (None: vLLM's default for --gpu): sliding-window and chunked
    # groups reserve blocks for concurrent batches x max_num_batched_tokens in flight.
    max_num_batched_tokens: int | None = Field(default=None, ge=1)
    max_num_seqs: int | None = Field(default=None, ge=1)
    async_scheduling: bool | None = None
    prefix_caching: bool = True  # vLLM's default; hybrids then hold state blocks in align mode
    # The release whose rules decide (HMA, capacity formula); None: the newest tabled.
    vllm_version: str | None = None
    # The KV connector vLLM runs with: the one --kv-offloading-size makes by default; None
    # for no connector. Its SupportsHMA at the release decides HMA.
    kv_connector: str | None = "OffloadingConnector"
    disable_hybrid_kv_cache_manager: bool | None = None  # None: vLLM decides
    env: dict[str, str] = Field(default_factory=dict)  # the deployment's vLLM env vars

    @model_validator(mode="after")
    def _consistent(self) -> Deployment:
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
        return self


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
        return Deployment(**values)
    except ValidationError as exc:
        first = exc.errors()[0]
        if first["loc"]:
            flag = "--" + str(first["loc"][0]).replace("_", "-")
            raise KvtoolError(f"{flag} {first.get('input')!r}: {first['msg']}") from None
        raise KvtoolError(str(first["msg"]).removeprefix("Value error, ")) from None
