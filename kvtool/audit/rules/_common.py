"""Small helpers shared by the rule families: suggestions and token-level fixes."""

from __future__ import annotations

from collections.abc import Iterable

from kvtool.audit.context import RuleContext
from kvtool.audit.model import Fix, ServeOption, SourceToken
from kvtool.suggest import closest, did_you_mean

__all__ = ["closest", "did_you_mean"]  # the rule families' suggestions, shared with the CLI

# difflib ratio a flag name (without its dashes) must reach before it is offered as the
# misspelt one: `--kv-offload-size` -> `--kv-offloading-size` is 0.91, while the unrelated
# `--num-scheduler-steps` -> `--max-num-scheduled-tokens` is 0.65. Shared words between
# flag names (`num`, `max`, `kv`) make lower ratios guesses, not typos.
FLAG_SUGGESTION_CUTOFF = 0.75


# Connector names share the word `Connector`: compared whole they look alike
# (`AcmeStoreConnector` -> `MooncakeStoreConnector` is 0.80), so a whole-name match must be
# near-exact and otherwise only the distinguishing part is compared (`AcmeStore` and
# `MooncakeStore`: 0.64, no guess; `MoonCake` and `Mooncake`: 0.88).
CONNECTOR_WORD = "Connector"
WHOLE_NAME_CUTOFF = 0.9


def did_you_mean_connector(name: str, registered: Iterable[str]) -> str:
    """Like :func:`did_you_mean` for a connector name, without guesses that rest on the
    shared word `Connector`."""
    pool = list(registered)
    match = closest(name, pool, cutoff=WHOLE_NAME_CUTOFF)
    distinct = name.replace(CONNECTOR_WORD, "")
    if match is None and distinct:
        by_part = {c.replace(CONNECTOR_WORD, ""): c for c in pool}
        part = closest(distinct, by_part, cutoff=FLAG_SUGGESTION_CUTOFF)
        match = by_part[part] if part is not None else None
    return f" Did you mean `{match}`?" if match else ""


def did_you_mean_flag(flag: str, spellings: Iterable[str]) -> str:
    """Like :func:`did_you_mean` for a command-line flag: compared without the leading
    dashes (every flag shares them) and only above :data:`FLAG_SUGGESTION_CUTOFF`."""
    by_bare = {s.lstrip("-"): s for s in spellings}
    match = closest(flag.lstrip("-"), by_bare, cutoff=FLAG_SUGGESTION_CUTOFF)
    return f" Did you mean `{by_bare[match]}`?" if match else ""


def option_tokens(ctx: RuleContext, opt: ServeOption) -> tuple[SourceToken, ...]:
    """The argv tokens that spell ``opt``: the flag token and, when separate, its value token.

    Empty when the option did not come from argv words (a ``--config`` YAML item) or
    its token cannot be found, so a fix is never applied to the wrong words.
    """
    tokens = ctx.config.invocation.tokens
    for index, token in enumerate(tokens):
        if token.location != opt.location or not token.text.startswith(opt.written):
            continue
        if "=" in token.text or isinstance(opt.value, bool) or opt.value is None:
            return (token,)
        following = tokens[index + 1] if index + 1 < len(tokens) else None
        if following is not None and following.text == str(opt.value):
            return (token, following)
        return (token,)
    return ()


def removal_fix(
    ctx: RuleContext, opt: ServeOption, description: str, *, safe: bool = True
) -> Fix | None:
    """A fix deleting ``opt``'s tokens, or None when they cannot be located."""
    tokens = option_tokens(ctx, opt)
    if not tokens:
        return None
    return Fix(
        applicability="safe" if safe else "unsafe",
        description=description,
        remove_tokens=tokens,
        replacement=(),
    )


def replacement_fix(
    ctx: RuleContext,
    opt: ServeOption,
    replacement: tuple[str, ...],
    description: str,
    *,
    safe: bool,
) -> Fix:
    """A fix replacing ``opt``'s tokens by ``replacement``; display-only when tokens are unknown."""
    tokens = option_tokens(ctx, opt)
    if not tokens:
        return Fix(applicability="display", description=description)
    return Fix(
        applicability="safe" if safe else "unsafe",
        description=description,
        remove_tokens=tokens,
        replacement=replacement,
    )


def conditional_note(opt: ServeOption | None) -> str:
    """A message suffix for options that only appear when a shell variable is set."""
    return (
        " (only when the surrounding `${VAR:+...}` expansion is active)"
        if opt and opt.conditional
        else ""
    )
