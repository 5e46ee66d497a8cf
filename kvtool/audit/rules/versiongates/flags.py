"""VG000-VG003: the command line against the target release's parser: parse errors,
unknown, removed and deprecated flags.
"""

from __future__ import annotations

from collections.abc import Iterable

from kvtool.audit.context import RuleContext
from kvtool.audit.model import Finding, Fix, ServeOption, Severity
from kvtool.audit.references import ARG_UTILS_032, Reference, vllm_pr, vllm_source
from kvtool.audit.registry import ConfigRule, register
from kvtool.audit.rules._common import conditional_note, did_you_mean_flag, removal_fix
from kvtool.audit.rules._history import PreTableRemoval, pre_table_removals
from kvtool.audit.rules._plugins import PluginImage, image_plugin, plugin_cli
from kvtool.audit.rules.versiongates._gates import (
    first_seen_later,
    removed_at_target,
    unknown_options,
)

# Curated replacements (rules/curated/replacements.toml) that start like this say the flag can go,
# so deleting it is the safe fix; any other replacement needs a human to migrate the setting.
DROP_PREFIX = "drop the flag"


def _flag_spellings(ctx: RuleContext) -> list[str]:
    names: list[str] = []
    for fact in ctx.facts.flags:
        names.append(fact.name)
        names.extend(fact.aliases)
        if fact.negative:
            names.append(fact.negative)
    return names


@register
class ArgumentParseError(ConfigRule):
    """Reports what vLLM's argument parser at the target release would reject outright.

    What
    ----
    A problem found while normalising the command the way vLLM's `FlexibleArgumentParser`
    does: a flag without its value, an ambiguous abbreviation, JSON that does not parse.

    Why
    ---
    vLLM exits with a usage error (exit code 2) before loading the model.

    Example
    -------
    `vllm serve m --kv-transfer-config '{"kv_connector": '` (truncated JSON).

    Fix
    ---
    Correct the argument as the message says.

    Releases
    --------
    Every release; the parser rules (abbreviations, `--no-` forms, JSON flags) are read per release.
    """

    code = "VG000"
    name = "argument-parse-error"
    default_severity = Severity.error
    summary = "vLLM's argument parser would reject this command line"
    references = (ARG_UTILS_032,)
    since = "0.1.0"

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        for problem in ctx.config.problems:
            yield self.finding(problem.message, flag=problem.flag, location=problem.location)


@register
class UnknownFlag(ConfigRule):
    """Reports a flag the target release does not have and never removed.

    What
    ----
    A `vllm serve` option that is not registered at the target release: a typo, or a flag
    that only appears in a later release. The closest flag of that release is suggested.

    Why
    ---
    argparse rejects unknown options (`unrecognized arguments`) and vLLM exits before
    loading the model, often minutes into a rollout.

    Example
    -------
    `--kv-offload-size 100` (the flag is `--kv-offloading-size`), or
    `--prefix-cache-retention-interval 64` on 0.28.0 (first in 0.29.0).

    Fix
    ---
    Use the suggested spelling or upgrade to the release named in the message. A name is
    suggested only when it is close (difflib ratio 0.75 without the dashes), not when the
    flags merely share words.

    Plugin CLIs add flags of their own: on a vLLM-Omni image (`vllm/vllm-omni`), or with
    `--omni` on an image kvtool cannot place, flags no vLLM release has are one info
    naming them (kvtool does not know the plugin's flags), per the curated
    `rules/curated/plugin_images.toml`. On a plain vLLM image they stay errors.

    Releases
    --------
    Data-driven from `rules/releases/<version>.json` and `index.json` (first_seen).
    """

    code = "VG001"
    name = "unknown-flag"
    default_severity = Severity.error
    summary = "flag not known at the target vLLM release"
    fix_applicability = "display"
    references = (
        ARG_UTILS_032,
        Reference(
            url="https://github.com/vllm-project/vllm-omni/blob/main/vllm_omni/entrypoints/cli/main.py",
            note="vLLM-Omni: a command with --omni is parsed by the plugin's own serve parser",
        ),
    )
    since = "0.1.0"
    other_severities = (Severity.info,)

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        plugin = plugin_cli(ctx)
        from_plugin: list[ServeOption] = []
        for opt, canonical in unknown_options(ctx):
            gate = ctx.gate("flag", canonical)
            if removed_at_target(gate, ctx) or (gate is None and canonical in pre_table_removals()):
                continue  # removed-flag reports it
            if plugin is not None and gate is None:
                from_plugin.append(opt)  # no vLLM release has it: the plugin's own flag
                continue
            if (later := first_seen_later(gate, ctx)) is not None:
                message = (
                    f"`{opt.written}` is not a flag of vLLM {ctx.version}: it first appears in "
                    f"{later}."
                )
            else:
                message = f"`{opt.written}` is not a flag of vLLM {ctx.version}." + (
                    did_you_mean_flag(opt.flag, _flag_spellings(ctx))
                )
            yield self.finding(
                message + conditional_note(opt),
                flag=canonical,
                location=opt.location,
                first_seen=gate.first_seen if gate else None,
            )
        if plugin is not None and from_plugin:
            yield self._plugin_flags(ctx, plugin, from_plugin)

    def _plugin_flags(
        self, ctx: RuleContext, plugin: PluginImage, options: list[ServeOption]
    ) -> Finding:
        """One info for every flag a plugin CLI may add: kvtool has no table of them."""
        names = ", ".join(f"`{opt.written}`" for opt in options)
        how = (
            f"the image `{ctx.config.invocation.image}` runs {plugin.plugin}"
            if image_plugin(ctx) is plugin
            else f"`{'`, `'.join(plugin.marker_flags)}` hands the command to {plugin.plugin}"
        )
        return self.finding(
            f"{names}: not flags of vLLM {ctx.version}; {how}, whose CLI adds its own "
            f"flags ({plugin.source.split(' ', 1)[0]}). kvtool does not know that plugin's "
            "flags, so they were not checked.",
            flag=options[0].flag,
            location=options[0].location,
            severity=Severity.info,
            plugin=plugin.plugin,
        )


@register
class RemovedFlag(ConfigRule):
    """Reports a flag that existed in an earlier release and is gone at the target release.

    What
    ----
    A `vllm serve` option that the cross-release index shows as removed at or before the
    target release, with the release that removed it and its replacement when one exists.

    Why
    ---
    vLLM rejects the option at startup. Deprecation messages are not reliable guides:
    `--calculate-kv-scales` said "will be removed in v0.19" and was removed in 0.28.0.

    Example
    -------
    `--calculate-kv-scales` on 0.28.0 or later; `--swap-space 4` on 0.18.0 or later.

    Fix
    ---
    Delete the flag (a safe fix when it has no replacement) or switch to the replacement.

    Releases
    --------
    Data-driven: `gone_at` in `rules/releases/index.json`. Flags already gone in the oldest
    tabled release (`--num-scheduler-steps`) come from the curated
    `rules/curated/removed_before_tables.toml`, each row citing the change that removed it.
    """

    code = "VG002"
    name = "removed-flag"
    default_severity = Severity.error
    summary = "flag removed at or before the target vLLM release"
    fix_applicability = "safe"
    references = (
        vllm_pr(49389, "--calculate-kv-scales removed (0.28.0)"),
        vllm_pr(22779, "the multi-step scheduling flags removed (before 0.10.2)"),
        ARG_UTILS_032,
    )
    since = "0.1.0"
    other_fix_applicabilities = ("display",)

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        for opt, canonical in unknown_options(ctx):
            gate = ctx.gate("flag", canonical)
            if gate is None and (early := pre_table_removals().get(canonical)) is not None:
                yield self._removed_before_tables(ctx, opt, early)
                continue
            if not removed_at_target(gate, ctx):
                continue
            spelled = opt.written if opt.written.startswith("-") else canonical
            message = (
                f"`{spelled}` was removed in vLLM {gate.gone_at}; "
                f"vLLM {ctx.version} refuses to start with it."
            )
            fix: Fix | None
            if gate.replacement:
                message += f" Instead: {gate.replacement}."
            if gate.replacement and not gate.replacement.startswith(DROP_PREFIX):
                fix = Fix(applicability="display", description=f"instead: {gate.replacement}")
            else:
                fix = removal_fix(ctx, opt, f"remove {opt.written}")
            yield self.finding(
                message + conditional_note(opt),
                flag=canonical,
                location=opt.location,
                fix=fix,
                gone_at=gate.gone_at,
                replacement=gate.replacement,
            )

    def _removed_before_tables(
        self, ctx: RuleContext, opt: ServeOption, early: PreTableRemoval
    ) -> Finding:
        """A flag gone before the oldest release table: the curated row says when and why."""
        spelled = opt.written if opt.written.startswith("-") else early.name
        return self.finding(
            f"`{spelled}` was removed before vLLM {early.gone_by} ({early.removed}; "
            f"{early.source}); vLLM {ctx.version} refuses to start with it. "
            f"Instead: {early.replacement}." + conditional_note(opt),
            flag=early.name,
            location=opt.location,
            fix=removal_fix(ctx, opt, f"remove {opt.written}"),
            replacement=early.replacement,
        )


@register
class DeprecatedFlag(ConfigRule):
    """Reports a flag the target release marks as deprecated.

    What
    ----
    An option whose help text, docstring, `deprecated=True` or validator marks it
    deprecated at the target release; vLLM's own deprecation message is quoted.

    Why
    ---
    Deprecated flags are removed later, sometimes long after the release their message
    promises, and some already do nothing (`--mamba-cache-mode` in 0.33.0).

    Example
    -------
    `--calculate-kv-scales` on 0.19.0-0.27.1 (deprecated in 0.19.0, not before:
    0.18.0 and 0.18.1 carry no deprecation).

    Fix
    ---
    Follow the deprecation message; plan the removal before upgrading.

    Releases
    --------
    Data-driven: `deprecated` per flag in `rules/releases/<version>.json`.
    """

    code = "VG003"
    name = "deprecated-flag"
    default_severity = Severity.warning
    summary = "flag deprecated at the target vLLM release"
    references = (
        vllm_source(
            "0.19.0",
            "vllm/config/cache.py",
            "CacheConfig at 0.19.0: calculate_kv_scales deprecated",
        ),
        ARG_UTILS_032,
    )
    since = "0.1.0"

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        for opt in ctx.config.options:
            fact = ctx.flag_fact(opt.flag) if opt.known else None
            if fact is None or not fact.deprecated:
                continue
            detail = f": {fact.deprecation_message}" if fact.deprecation_message else "."
            yield self.finding(
                f"`{fact.name}` is deprecated in vLLM {ctx.version}{detail}"
                + conditional_note(opt),
                flag=fact.name,
                location=opt.location,
            )
