"""What the cross-release index says about a name, shared by the VG modules."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TypeGuard

from kvtool.audit.context import RuleContext, vtuple
from kvtool.audit.model import ServeOption
from kvtool.releases.model import Gate


def positive_flag(flag: str) -> str:
    return "--" + flag[len("--no-") :] if flag.startswith("--no-") else flag


def unknown_options(ctx: RuleContext) -> Iterator[tuple[ServeOption, str]]:
    """Options the target release does not know, with the canonical name to look up in the index."""
    for opt in ctx.config.options:
        if not opt.known:
            yield opt, positive_flag(opt.flag)


def removed_at_target(gate: Gate | None, ctx: RuleContext) -> TypeGuard[Gate]:
    """The name was removed at or before the target release (``gone_at`` <= target)."""
    return (
        gate is not None
        and gate.gone_at is not None
        and vtuple(gate.gone_at) <= vtuple(ctx.version)
    )


def first_seen_later(gate: Gate | None, ctx: RuleContext) -> str | None:
    """The later release where the name first appears, or None (known, or never seen)."""
    if gate is not None and gate.first_seen and vtuple(gate.first_seen) > vtuple(ctx.version):
        return gate.first_seen
    return None
