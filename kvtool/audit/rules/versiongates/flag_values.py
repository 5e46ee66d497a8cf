"""VG005, VG006: flag values the target release's argparse refuses (choices, numbers)."""

from __future__ import annotations

from collections.abc import Iterable

from kvtool.audit.context import RuleContext
from kvtool.audit.model import Finding, Severity
from kvtool.audit.numeric import rejection
from kvtool.audit.references import ARG_UTILS_032, vllm_pr, vllm_source
from kvtool.audit.registry import ConfigRule, register
from kvtool.audit.rules._common import conditional_note, did_you_mean, replacement_fix


@register
class InvalidChoice(ConfigRule):
    """Reports a value outside the choices argparse enforces at the target release.

    What
    ----
    An enum-like flag (`--mamba-cache-mode`, `--kv-offloading-backend`, `--kv-cache-dtype`
    up to 0.32.x) given a value the target release's parser does not accept.

    Why
    ---
    argparse exits with `invalid choice` before the model loads. Values disappear between
    releases: `--mamba-cache-mode all` is rejected from 0.32.0.

    Example
    -------
    `--mamba-cache-mode all` on 0.32.0 (choices `align`, `none`).

    Fix
    ---
    Use a listed choice; for migrations the table names (`all` -> `align`) a safe fix is offered.

    Releases
    --------
    Data-driven: `choices` per flag in `rules/releases/<version>.json`. Flags whose type also
    admits free strings (`--load-format`, `--kv-cache-dtype` in 0.33.0) are not enforced.
    """

    code = "VG005"
    name = "invalid-choice"
    default_severity = Severity.error
    summary = "value not among the choices the target release accepts"
    fix_applicability = "safe"
    references = (
        vllm_pr(58997, "--mamba-cache-mode all removed from the choices (0.32.0)"),
        ARG_UTILS_032,
    )
    since = "0.1.0"
    other_fix_applicabilities = ("display",)

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        for opt in ctx.config.options:
            fact = ctx.flag_fact(opt.flag) if opt.known else None
            if (
                fact is None
                or fact.choices is None
                or isinstance(opt.value, bool)
                or opt.value is None
            ):
                continue
            value = str(opt.value)
            if value in fact.choices:
                continue
            migration = ctx.semantics.choice_migration(fact.name, value)
            choices = ", ".join(f"`{c}`" for c in fact.choices)
            message = (
                f"`{fact.name} {value}` is not accepted by vLLM {ctx.version} (choices: {choices})."
            )
            fix = None
            if migration is not None:
                message += f" Use `{migration.replacement}`."
                fix = replacement_fix(
                    ctx,
                    opt,
                    (fact.name, migration.replacement),
                    f"{fact.name} {value} -> {migration.replacement}",
                    safe=True,
                )
            else:
                message += did_you_mean(value, fact.choices)
            yield self.finding(
                message + conditional_note(opt),
                flag=fact.name,
                location=opt.location,
                fix=fix,
                choices=list(fact.choices),
            )


@register
class InvalidNumber(ConfigRule):
    """Reports a numeric flag value the target release's argparse type parser rejects.

    What
    ----
    A value for an integer or float flag that vLLM's parser for that flag cannot read:
    `--gpu-memory-utilization 90%`, `--tensor-parallel-size four`, `--max-num-seqs 0.5`,
    or a unit suffix on a flag without the human-readable parser (`--max-num-seqs 1k`).
    A few flags (`--max-model-len`, `--max-num-batched-tokens`, `--kv-cache-memory-bytes`
    and more in later releases) take human-readable integers: `32k` is 32,000, `32K` is
    32,768, decimals only with decimal units; `--max-model-len` also takes `auto` from the
    release its parser became `human_readable_int_or_auto`.

    Why
    ---
    argparse exits with `invalid ... value` before anything loads; the parser each flag
    gets, and the units it knows (`t`/`T` from 0.13.0), differ between releases.

    Example
    -------
    `--max-model-len 1.5K` on 0.32.0 (decimals are not allowed with a binary suffix).

    Fix
    ---
    Write the number the parser expects; the message says which form it reads.

    Releases
    --------
    Data-driven: `value_type` and `accepts_none` per flag and `human_int_suffixes` per
    release in `rules/releases/<version>.json`, read from `_compute_kwargs` and explicit
    `type=` arguments. Values from an unresolved shell variable are not judged.
    """

    code = "VG006"
    name = "invalid-number"
    default_severity = Severity.error
    summary = "numeric flag value the target release's parser rejects"
    references = (
        ARG_UTILS_032,
        vllm_source("0.32.0", "vllm/utils/argparse_utils.py", "vLLM's argparse helpers at 0.32.0"),
    )
    since = "0.1.0"

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        for opt in ctx.config.options:
            fact = ctx.flag_fact(opt.flag) if opt.known and not opt.key_path else None
            if fact is None or fact.value_type is None:
                continue
            # A list flag (nargs "+") parses each word with the same parser.
            words = opt.value if isinstance(opt.value, list) else [opt.value]
            for word in filter(_judgeable, words):
                problem = rejection(
                    str(word),
                    fact.value_type,
                    accepts_none=fact.accepts_none,
                    suffixes=ctx.facts.human_int_suffixes,
                )
                if problem is None:
                    continue
                yield self.finding(
                    f"`{fact.name} {word}`: vLLM {ctx.version} parses this flag with "
                    f"`{fact.value_type}` and refuses the value: {problem}."
                    + conditional_note(opt),
                    flag=fact.name,
                    location=opt.location,
                    parser=fact.value_type,
                )


def _judgeable(value: object) -> bool:
    """A single word kvtool can read: not a flag without value, a boolean or a JSON
    object, and no shell expansion left in it (``$VAR``, ``$(...)``, backticks)."""
    if value is None or isinstance(value, (bool, list, dict)):
        return False
    return not ("$" in str(value) or "`" in str(value))
