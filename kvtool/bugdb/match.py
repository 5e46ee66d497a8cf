"""Does a record's trigger hold for one serve config? (the single matcher for every record)

:func:`trigger_holds` evaluates :class:`~kvtool.bugdb.model.Trigger` over a
:class:`~kvtool.audit.context.RuleContext`; an unset condition is ignored. A condition
on the model holds only when the model is known: an unknown model never matches a
model condition, so a record never fires on a guess about the model.
"""

from __future__ import annotations

import re

from kvtool.audit.context import RuleContext
from kvtool.bugdb.model import PodMate, Trigger
from kvtool.versions import VersionRange

# Pseudo-traits a trigger may name besides kvtool.models.TRAITS.
_DERIVED_TRAITS = ("hybrid", "state")


def trigger_holds(ctx: RuleContext, trigger: Trigger) -> bool:
    return (
        _connectors_hold(ctx, trigger)
        and all(ctx.option(flag) is not None for flag in trigger.flags)
        and all(
            _matches(pattern, option_values(ctx, path, trigger.defaults.get(path)))
            for path, pattern in trigger.values.items()
        )
        and _extra_holds(ctx, trigger)
        and _env_holds(ctx, trigger.env)
        and not (trigger.unless_env and _env_holds(ctx, trigger.unless_env))
        and _model_holds(ctx, trigger)
        and _parallel_holds(ctx, trigger)
        and _image_holds(ctx, trigger)
        and (not trigger.inputs or ctx.config.invocation.kind in trigger.inputs)
        and (trigger.pod_mate is None or _pod_mate_in(ctx, trigger.pod_mate))
        and (trigger.no_pod_mate is None or not _pod_mate_in(ctx, trigger.no_pod_mate))
        and (trigger.vllm is None or VersionRange(trigger.vllm).contains(ctx.version))
    )


def _connectors_hold(ctx: RuleContext, trigger: Trigger) -> bool:
    in_use = set(ctx.connector_names)
    if trigger.connectors and not in_use & set(trigger.connectors):
        return False
    if not in_use >= set(trigger.all_connectors):
        return False
    return not (trigger.offload and not in_use & set(ctx.semantics.offload_connectors))


def _extra_holds(ctx: RuleContext, trigger: Trigger) -> bool:
    if not trigger.extra and not trigger.extra_above:
        return True
    return any(
        all(_matches(pattern, tree_values(extra, path)) for path, pattern in trigger.extra.items())
        and all(
            _above(bound, tree_values(extra, path)) for path, bound in trigger.extra_above.items()
        )
        for name, extra in ctx.connector_extra_configs
        if not trigger.connectors or name in trigger.connectors
    )


def _above(bound: float, values: list[object]) -> bool:
    """One of ``values`` is a number (or numeric text) greater than ``bound``."""
    for value in values:
        if isinstance(value, bool):
            continue
        try:
            if float(str(value)) > bound:
                return True
        except ValueError:
            continue
    return False


def _env_holds(ctx: RuleContext, wanted: dict[str, str]) -> bool:
    """Every variable of ``wanted`` is set and its value matches the regex in full,
    ignoring case (so ``True`` also matches ``true``)."""
    for name, pattern in wanted.items():
        value = ctx.env_value(name)
        if value is None or re.fullmatch(pattern, value, re.IGNORECASE) is None:
            return False
    return True


def _model_holds(ctx: RuleContext, trigger: Trigger) -> bool:
    if not trigger.needs_model:
        return True
    if trigger.model is not None and not re.search(
        trigger.model, ctx.config.model or "", re.IGNORECASE
    ):
        return False
    if not trigger.model_traits:
        return True
    model = ctx.model
    if model is None:
        return False
    traits = set(model.traits)
    if model.hybrid:
        traits.add("hybrid")
    if model.mamba:
        traits.add("state")
    return all(t in traits for t in trigger.model_traits)


def _parallel_holds(ctx: RuleContext, trigger: Trigger) -> bool:
    if trigger.min_tp is not None and ctx.tp < trigger.min_tp:
        return False
    if trigger.min_pp is not None and ctx.pp < trigger.min_pp:
        return False
    if trigger.min_dp is not None and ctx.int_option("--data-parallel-size", 1) < trigger.min_dp:
        return False
    return not (trigger.expert_parallel and not ctx.bool_option("--enable-expert-parallel"))


def _image_holds(ctx: RuleContext, trigger: Trigger) -> bool:
    if trigger.image is None:
        return True
    image = ctx.config.invocation.image
    return image is not None and re.search(trigger.image, image) is not None


def _pod_mate_in(ctx: RuleContext, wanted: PodMate) -> bool:
    """Another container of the engine's pod has everything ``wanted`` names."""
    for container in ctx.config.invocation.pod_containers:
        if wanted.image is not None and not re.search(wanted.image, container.image or ""):
            continue
        argv = " ".join(token.text for token in container.argv)
        if wanted.argv is not None and not re.search(wanted.argv, argv):
            continue
        if wanted.gpus is not None and container.gpus is not wanted.gpus:
            continue
        return True
    return False


def _matches(pattern: str, values: list[object]) -> bool:
    """One of ``values`` (scalars only) matches ``pattern`` in full, ignoring case."""
    return any(
        not isinstance(value, dict | list)
        and re.fullmatch(
            pattern, str(value).lower() if isinstance(value, bool) else str(value), re.IGNORECASE
        )
        is not None
        for value in values
    )


def option_values(ctx: RuleContext, path: str, default: str | None = None) -> list[object]:
    """The value of ``--flag`` or of ``--flag.key.key`` in a JSON-valued flag; ``default``
    (or nothing) when it is unset."""
    flag, _, keys = path.partition(".")
    if keys:
        found = tree_values(ctx.config.json_values.get(flag, {}), keys)
    else:
        option = ctx.option(flag)
        found = [] if option is None or option.value is None else [option.value]
    return found or ([default] if default is not None else [])


def tree_values(tree: object, path: str) -> list[object]:
    """Every value at ``key.key`` below ``tree``; a list on the way yields each element's."""
    found = [tree]
    for key in path.split("."):
        step: list[object] = []
        for node in found:
            for item in node if isinstance(node, list) else [node]:
                if isinstance(item, dict) and key in item:
                    step.append(item[key])
        found = step
    return [leaf for value in found for leaf in (value if isinstance(value, list) else [value])]


def known_traits() -> tuple[str, ...]:
    from kvtool.models import TRAITS

    return (*TRAITS, *_DERIVED_TRAITS)
