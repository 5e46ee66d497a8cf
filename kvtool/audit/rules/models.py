"""CN04x: what the audit can say about the served model, and what it cannot.

Model facts come from ``kvtool.models`` (a config.json, else the family table); the
rules here report when a model-dependent check had nothing to go on, and model traits
that change what KV offload can do.
"""

from __future__ import annotations

from collections.abc import Iterable

from kvtool.audit.context import RuleContext
from kvtool.audit.model import Finding, Severity
from kvtool.audit.references import vllm_source
from kvtool.audit.registry import ConfigRule, register

DISABLE_HMA = "--disable-hybrid-kv-cache-manager"
# Rules that need the model's layer kinds, named in the unknown-model note.
MODEL_CHECKS: tuple[tuple[str, str], ...] = (
    ("CN011", "hybrid model with HMA off"),
    ("CN041", "chunked local attention turning HMA off"),
)


@register
class ModelUnknown(ConfigRule):
    """Notes that the served model is unknown, so model-dependent checks did not run.

    What
    ----
    A KV connector, KV offload or an HMA flag is configured, and the model is neither a
    local path with a config.json nor a name the family table knows.

    Why
    ---
    Whether HMA off stops the engine (attention + Mamba/Gated DeltaNet/linear attention) or
    only costs capacity (sliding window) depends on the model's layers. Saying nothing would
    read as "checked and fine".

    Example
    -------
    `vllm serve my-org/private-model --kv-offloading-size 100`.

    Fix
    ---
    Point the audit at the model's config.json (`--model-config PATH`, `model-config` in the
    settings, or a local model directory as the served model).

    Releases
    --------
    Every release. Families: `rules/models/families.toml`.
    """

    code = "CN040"
    name = "model-unknown"
    default_severity = Severity.info
    summary = "served model unknown: the checks that need its layer kinds did not run"
    references = (
        vllm_source(
            "0.32.0",
            "vllm/v1/core/kv_cache_utils.py",
            "KV cache specs and hybrid grouping at 0.32.0",
        ),
    )
    since = "0.2.0"

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        if ctx.connector is None and ctx.option(DISABLE_HMA) is None:
            return
        if ctx.model is not None:
            return
        skipped = ", ".join(f"{code} ({what})" for code, what in MODEL_CHECKS)
        shown = f"`{ctx.config.model}`" if ctx.config.model else "the served model"
        yield self.finding(
            f"kvtool does not know {shown} (no config.json, no family match), so these checks "
            f"did not run: {skipped}. Give its config.json with --model-config.",
            model=ctx.config.model,
            skipped=[code for code, _ in MODEL_CHECKS],
        )


@register
class ChunkedLocalAttentionTurnsHmaOff(ConfigRule):
    """Notes that vLLM turns HMA off for chunked-local-attention models (Llama 4).

    What
    ----
    The model uses chunked local attention (`attention_chunk_size`) and
    `VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE` is not `1`.

    Why
    ---
    vLLM disables HMA for such models by default ("There is a latency regression when using
    chunked local attention with the hybrid KV cache manager"), so chunked layers are stored
    like full attention and the GPU cache holds fewer tokens; an HMA-only setting (a
    connector chosen for its SupportsHMA) buys nothing here.

    Example
    -------
    `meta-llama/Llama-4-Scout-17B-16E-Instruct` with `--kv-offloading-size 200`.

    Fix
    ---
    Accept it, or set `VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=1` after measuring.

    Releases
    --------
    Every release with the environment variable (release tables, `env_vars`).
    """

    code = "CN041"
    name = "chunked-local-attention-turns-hma-off"
    default_severity = Severity.info
    summary = "vLLM turns HMA off for chunked local attention unless told otherwise"
    references = (
        vllm_source(
            "0.12.0",
            "vllm/config/vllm.py",
            "VllmConfig at 0.12.0: any --kv-transfer-config turns HMA off",
        ),
    )
    since = "0.2.0"

    ENV = "VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE"

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        if ctx.connector is None or self.ENV not in ctx.env_var_facts:
            return
        if ctx.env_value(self.ENV) == "1":
            return
        model = ctx.model
        if model is None or not model.chunked_local:
            return
        yield self.finding(
            f"`{model.name}` uses chunked local attention: vLLM {ctx.version} turns HMA off "
            f"for it unless `{self.ENV}=1`, so chunked layers are cached like full attention.",
            flag=self.ENV,
        )
