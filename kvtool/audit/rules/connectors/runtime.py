"""CN032, CN035: execution and loading flags that cost an offload deployment (eager mode,
fastsafetensors without GDS).
"""

from __future__ import annotations

from collections.abc import Iterable

from kvtool.audit.context import RuleContext
from kvtool.audit.model import Finding, Severity
from kvtool.audit.references import vllm_source
from kvtool.audit.registry import ConfigRule, register
from kvtool.audit.rules._common import conditional_note, removal_fix
from kvtool.audit.rules._premises import premise


def _offloading(ctx: RuleContext) -> str | None:
    """The offload connector in use (a child of MultiConnector counts), or None."""
    return next((n for n in ctx.connector_names if n in ctx.semantics.offload_connectors), None)


@register
class EnforceEagerWithOffload(ConfigRule):
    """Reports `--enforce-eager` on a deployment that uses KV offload.

    What
    ----
    `--enforce-eager` disables CUDA graphs. It is often added as a fragmentation workaround.

    Why
    ---
    It hurts steady-state throughput by more than fragmentation costs: dropping it cut a
    prefix-cache-hit turn from 2.4 s to 0.64 s on Qwen3-4B (field guide). Keep it only where
    the architecture needs it (hybrid DeltaNet + attention models).

    Example
    -------
    `--kv-offloading-size 100 --enforce-eager`.

    Fix
    ---
    Remove `--enforce-eager` unless the model needs it.

    Releases
    --------
    Every release.
    """

    code = "CN032"
    name = "enforce-eager-with-offload"
    default_severity = Severity.warning
    summary = "--enforce-eager disables CUDA graphs on an offload deployment"
    fix_applicability = "unsafe"
    references = (
        vllm_source(
            "0.32.0", "vllm/config/model.py",
            "ModelConfig at 0.32.0: enforce_eager turns CUDA graphs off",
        ),
    )
    since = "0.1.0"

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        opt = ctx.option("--enforce-eager")
        if opt is None or opt.value is not True or _offloading(ctx) is None:
            return
        if ctx.model is not None and ctx.model.hybrid:
            return  # hybrid DeltaNet-style models may genuinely need eager mode
        yield self.finding(
            "`--enforce-eager` disables CUDA graphs and costs more throughput than it saves "
            "in fragmentation." + conditional_note(opt),
            flag="--enforce-eager",
            location=opt.location,
            fix=removal_fix(ctx, opt, "remove --enforce-eager", safe=False),
        )


@register
class FastsafetensorsNoGdsWithTp(ConfigRule):
    """Notes that `--load-format fastsafetensors` never uses GPUDirect Storage with TP > 1.

    What
    ----
    `--load-format fastsafetensors` with `--tensor-parallel-size` above 1.

    Why
    ---
    vLLM always passes `nogds=True` to fastsafetensors when TP > 1, so multi-GPU deployments
    that expect GDS loading (and set up cuFile for it) load through host memory instead.
    The field guide's `GDS is not supported in this platform` warning is the library's, not
    vLLM's; vLLM logs "GDS not enabled, setting `nogds=True`".

    Example
    -------
    `--load-format fastsafetensors -tp 8`.

    Fix
    ---
    Nothing to change for correctness; do not budget GDS load times for TP > 1.

    Releases
    --------
    `load_format.fastsafetensors_nogds_tp` in `rules/curated/semantics.toml` (0.17.0 on;
    before it vLLM fell back to `nogds` only after GDS failed), a premise proven from the
    wheels (`rules/audit/premises.json`).
    """

    code = "CN035"
    name = "fastsafetensors-no-gds-with-tp"
    default_severity = Severity.info
    summary = "--load-format fastsafetensors does not use GDS with TP > 1"
    references = (
        vllm_source(
            "0.32.0", "vllm/model_executor/model_loader/weight_utils.py",
            "the fastsafetensors loader at 0.32.0 sets nogds=True when TP > 1",
        ),
    )
    since = "0.1.0"

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        opt = ctx.option("--load-format")
        if opt is None or opt.value != "fastsafetensors" or ctx.tp == 1:
            return
        verdict = premise("load_format.fastsafetensors_nogds_tp", ctx.version)
        if not verdict.holds:
            return
        yield self.finding(
            f"With TP = {ctx.tp} vLLM loads fastsafetensors with `nogds=True`: "
            "no GPUDirect Storage." + verdict.note,
            flag="--load-format",
            location=opt.location,
        )
