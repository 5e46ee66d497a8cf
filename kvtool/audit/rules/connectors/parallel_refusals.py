"""CN066: NixlConnector refuses this combination of parallelism at start-up.

The refusals and the conditions they are raised under are read from each release's NIXL
sources by ``scripts/gen_constraints.py`` (``nixl_refusals``). A condition is evaluated
over what the config says (TP, PP, DP, prefill/decode context parallel sizes, expert
parallel, ``kv_role``); any term kvtool cannot evaluate (the model's layout, the remote
peer's sizes) leaves the refusal unreported rather than guessed.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kvtool.audit.context import KV_TRANSFER_CONFIG, RuleContext
from kvtool.audit.model import Finding, Fix, Severity
from kvtool.audit.references import vllm_source
from kvtool.audit.registry import ConfigRule, register
from kvtool.audit.rules._constraints import ParallelRefusal, constraints_at

PCP_FLAG = "--prefill-context-parallel-size"
DCP_FLAG = "--decode-context-parallel-size"
PUSH = "NixlPushConnector"
PULL = "NixlPullConnector"

Value = int | bool | str | tuple[object, ...] | None  # None: kvtool cannot tell

_COMPARE: Mapping[type[ast.cmpop], Callable[[Any, Any], bool]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
}


def config_values(ctx: RuleContext) -> dict[str, Value]:
    """The identifiers NIXL's conditions use (locals and attributes alike), as set here."""
    pcp = ctx.int_option(PCP_FLAG, 1)
    dcp = ctx.int_option(DCP_FLAG, 1)
    dp = ctx.int_option("--data-parallel-size", 1)
    role = ctx.kv_transfer_config.get("kv_role")
    values: dict[str, Value] = {
        "pcp_size": pcp,
        "prefill_context_parallel_size": pcp,
        "local_pcp_size": pcp,
        "dcp_size": dcp,
        "decode_context_parallel_size": dcp,
        "local_dcp_size": dcp,
        "tensor_parallel_size": ctx.tp,
        "tp_size": ctx.tp,
        "pp_size": ctx.pp,
        "pipeline_parallel_size": ctx.pp,
        "data_parallel_size": dp,
        "dp_size": dp,
        "enable_expert_parallel": ctx.option("--enable-expert-parallel") is not None,
        "kv_role": role if isinstance(role, str) else None,
    }
    return values


def evaluate(condition: str, values: Mapping[str, Value]) -> bool | None:
    """``condition`` (Python source) over ``values``: True, False, or None when it depends
    on something else."""
    try:
        tree = ast.parse(condition.strip(), mode="eval")
    except SyntaxError:
        return None
    result = _eval(tree.body, values)
    return result if isinstance(result, bool) or result is None else bool(result)


def _eval(node: ast.expr, values: Mapping[str, Value]) -> Value:
    if isinstance(node, ast.Constant) and isinstance(node.value, int | str | bool):
        return node.value
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        items = tuple(_eval(e, values) for e in node.elts)
        return None if any(i is None for i in items) else items
    if isinstance(node, ast.Name | ast.Attribute):
        key = node.id if isinstance(node, ast.Name) else node.attr
        return values.get(key)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        inner = _eval(node.operand, values)
        return None if inner is None else not inner
    if isinstance(node, ast.BoolOp):
        return _bool_op(node, values)
    if isinstance(node, ast.Compare):
        return _compare(node, values)
    return None


def _bool_op(node: ast.BoolOp, values: Mapping[str, Value]) -> bool | None:
    results = [_eval(v, values) for v in node.values]
    known = [bool(r) for r in results if r is not None]
    if isinstance(node.op, ast.And):
        if False in known:
            return False
        return True if len(known) == len(results) else None
    if True in known:
        return True
    return False if len(known) == len(results) else None


def _compare(node: ast.Compare, values: Mapping[str, Value]) -> bool | None:
    left = _eval(node.left, values)
    for op, right_node in zip(node.ops, node.comparators, strict=True):
        right = _eval(right_node, values)
        compare = _COMPARE.get(type(op))
        if left is None or right is None or compare is None:
            return None
        try:
            if not compare(left, right):
                return False
        except TypeError:
            return None
        left = right
    return True


def _applies_to(refusal: ParallelRefusal, ctx: RuleContext) -> bool:
    """A push-only (pull-only) class refuses only when that transfer mode is chosen."""
    if refusal.cls not in (PUSH, PULL):
        return True
    mode = ctx.extra_config.get("transfer_mode", "pull")
    chosen = PUSH if PUSH in ctx.connector_names or mode == "push" else PULL
    return refusal.cls == chosen


@register
class NixlParallelismRefused(ConfigRule):
    """Reports NixlConnector with a context-, data- or expert-parallel layout it refuses.

    What
    ----
    The engine loads NixlConnector (alone or as a MultiConnector child), and every
    condition of one of the release's NIXL start-up refusals holds for this config: e.g.
    `--prefill-context-parallel-size` above 1 on a `kv_consumer` or `kv_both` engine, PCP
    together with DCP at TP above 1, or the push transfer mode with
    `--decode-context-parallel-size` above 1.

    Why
    ---
    The connector raises (`NotImplementedError` / `ValueError`) while the engine starts:
    the server never comes up. The message quotes vLLM's own.

    Example
    -------
    `--prefill-context-parallel-size 2 --kv-transfer-config
    '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'` on 0.32.0.

    Fix
    ---
    Use the layout the message names as supported (PCP on the prefill `kv_producer`
    only, DCP with the pull transfer mode), or drop the context parallelism on the NIXL
    side.

    Releases
    --------
    Read from each release's NIXL sources by `scripts/gen_constraints.py`
    (`rules/audit/constraints.json`: `nixl_refusals`, with the raising class). Refusals
    whose conditions name the model's layout or the remote peer are not reported;
    pipeline parallelism is CN061's.
    """

    code = "CN066"
    name = "nixl-parallelism-refused"
    default_severity = Severity.error
    summary = "NixlConnector refuses this context/data/expert-parallel layout at start-up"
    fix_applicability = "display"
    references = (
        vllm_source(
            "0.32.0",
            "vllm/distributed/kv_transfer/kv_connector/v1/nixl/connector.py",
            "NixlBaseConnector.__init__: PCP only on kv_producer; PCP+DCP needs TP 1",
        ),
    )
    since = "0.3.0"

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        if not any(n.startswith("Nixl") for n in ctx.connector_names):
            return
        facts = constraints_at(ctx.version)
        if facts is None:
            return
        values = config_values(ctx)
        for refusal in facts.nixl_refusals:
            if not _applies_to(refusal, ctx):
                continue
            if all(evaluate(c, values) is True for c in refusal.conditions):
                yield self.finding(
                    f"vLLM {ctx.version} refuses NixlConnector here at start-up "
                    f"({refusal.cls}): `{refusal.message}`",
                    flag=KV_TRANSFER_CONFIG,
                    location=ctx.connector_location,
                    fix=Fix(applicability="display", description="a layout NIXL supports"),
                    conditions=list(refusal.conditions),
                )
                return
