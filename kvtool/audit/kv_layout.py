"""The KV cache layout vLLM builds for an audited config, from ``kvtool.sizing``.

The block size (raised for attention + state hybrids), its reason and the state page come
from :func:`kvtool.sizing.kv_plan.plan_kv_cache`, the arithmetic ``kvtool size`` uses and
that tests check against vLLM 0.32's own code. The model must be one the sizing package
can read: a local config.json (``--model-config``, a local model path) or a catalog name.
The GPU is the sizing default (H200), which decides the attention backend.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from kvtool.audit.context import RuleContext
from kvtool.errors import KvtoolError

BLOCK_SIZE = "--block-size"


@dataclass(frozen=True)
class KvLayout:
    """What vLLM runs with: the block in tokens, why, and whether state layers shaped it."""

    model: str
    block_size: int
    reason: str
    backend: str
    has_state: bool  # Mamba / Gated DeltaNet / linear-attention pages next to attention
    backend_block_size: int  # the backend's own block, before any hybrid raise


@dataclass(frozen=True)
class _Key:
    model: str
    tp: int
    pp: int
    kv_cache_dtype: str
    dtype: str | None
    mamba_ssm_dtype: str | None
    attention_backend: str | None
    block_size: int | None
    prefix_caching: bool


def _model_source(ctx: RuleContext) -> str | None:
    """The config.json or catalog name the sizing package can read for the served model."""
    from kvtool.models.catalog import find_entry

    known = ctx.model
    if known is not None and known.source and Path(known.source).is_file():
        return known.source
    name = ctx.config.model
    if name and (find_entry(name) is not None or Path(name).expanduser().exists()):
        return name
    return None


def _text(ctx: RuleContext, flag: str) -> str | None:
    opt = ctx.option(flag)
    if opt is None or isinstance(opt.value, bool | dict):
        return None
    value = str(opt.value)
    return None if value == "auto" else value


def pinned_block_size(ctx: RuleContext) -> int | None:
    """``--block-size`` when given as a positive integer."""
    size = ctx.int_option(BLOCK_SIZE, 0)
    return size if size > 0 else None


def kv_layout(ctx: RuleContext) -> KvLayout | None:
    """The layout for this config; None when the model or the config cannot be sized."""
    source = _model_source(ctx)
    if source is None:
        return None
    key = _Key(
        model=source,
        tp=ctx.tp,
        pp=ctx.pp,
        kv_cache_dtype=_text(ctx, "--kv-cache-dtype") or "auto",
        dtype=_text(ctx, "--dtype"),
        mamba_ssm_dtype=_text(ctx, "--mamba-ssm-cache-dtype"),
        attention_backend=_text(ctx, "--attention-backend"),
        block_size=pinned_block_size(ctx),
        prefix_caching=not ctx.prefix_caching_off,
    )
    return _layout(key)


@lru_cache(maxsize=64)
def _layout(key: _Key) -> KvLayout | None:
    from kvtool.sizing import load_model_spec, make_deployment
    from kvtool.sizing.facts import sizing_facts
    from kvtool.sizing.kv_plan import plan_kv_cache

    try:
        spec = load_model_spec(key.model)
        facts = sizing_facts()
        values = {
            "tp": key.tp,
            "pp": key.pp,
            "kv_cache_dtype": key.kv_cache_dtype,
            "dtype": key.dtype,
            "mamba_ssm_dtype": key.mamba_ssm_dtype,
            "attention_backend": key.attention_backend,
            "prefix_caching": key.prefix_caching,
        }
        plan = plan_kv_cache(spec, make_deployment(block_size=key.block_size, **values), facts)
    except (KvtoolError, ValueError, OSError):
        return None
    return KvLayout(
        model=spec.name,
        block_size=plan.block.block_size,
        reason=plan.block.reason,
        backend=plan.backend.name,
        has_state=plan.block.state_page_bytes > 0,
        backend_block_size=plan.backend.preferred_block(facts.default_block_size),
    )
