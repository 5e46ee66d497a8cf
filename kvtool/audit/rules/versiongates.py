"""VG: version gates. Every fact comes from the generated release table of the
target release and the cross-release index (``rules/releases/``); no version is
written here."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import TypeGuard

from kvtool.audit.context import KV_TRANSFER_CONFIG, RuleContext, vtuple
from kvtool.audit.model import Finding, Fix, ServeOption, Severity
from kvtool.audit.numeric import rejection
from kvtool.audit.references import (
    ARG_UTILS_032,
    CONNECTOR_FACTORY_032,
    ENVS_032,
    KV_TRANSFER_CONFIG_032,
    Reference,
    vllm_pr,
    vllm_source,
)
from kvtool.audit.registry import ConfigRule, register
from kvtool.audit.rules._common import (
    conditional_note,
    did_you_mean,
    did_you_mean_connector,
    did_you_mean_flag,
    removal_fix,
    replacement_fix,
)
from kvtool.audit.rules._history import PreTableRemoval, pre_table_removals
from kvtool.audit.rules._plugins import (
    PluginImage,
    image_is_unplaced,
    image_may_bundle,
    image_plugin,
    plugin_cli,
    registering,
)
from kvtool.releases.model import Gate

# Curated replacements (rules/curated/replacements.toml) that start like this say the flag can go,
# so deleting it is the safe fix; any other replacement needs a human to migrate the setting.
DROP_PREFIX = "drop the flag"


def _positive_flag(flag: str) -> str:
    return "--" + flag[len("--no-") :] if flag.startswith("--no-") else flag


def _flag_spellings(ctx: RuleContext) -> list[str]:
    names: list[str] = []
    for fact in ctx.facts.flags:
        names.append(fact.name)
        names.extend(fact.aliases)
        if fact.negative:
            names.append(fact.negative)
    return names


def _unknown_options(ctx: RuleContext) -> Iterator[tuple[ServeOption, str]]:
    """Options the target release does not know, with the canonical name to look up in the index."""
    for opt in ctx.config.options:
        if not opt.known:
            yield opt, _positive_flag(opt.flag)


def _removed(gate: Gate | None, ctx: RuleContext) -> TypeGuard[Gate]:
    """The name was removed at or before the target release (``gone_at`` <= target)."""
    return (
        gate is not None
        and gate.gone_at is not None
        and vtuple(gate.gone_at) <= vtuple(ctx.version)
    )


def _first_seen_later(gate: Gate | None, ctx: RuleContext) -> str | None:
    """The later release where the name first appears, or None (known, or never seen)."""
    if gate is not None and gate.first_seen and vtuple(gate.first_seen) > vtuple(ctx.version):
        return gate.first_seen
    return None


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
        for opt, canonical in _unknown_options(ctx):
            gate = ctx.gate("flag", canonical)
            if _removed(gate, ctx) or (gate is None and canonical in pre_table_removals()):
                continue  # removed-flag reports it
            if plugin is not None and gate is None:
                from_plugin.append(opt)  # no vLLM release has it: the plugin's own flag
                continue
            if (later := _first_seen_later(gate, ctx)) is not None:
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
        for opt, canonical in _unknown_options(ctx):
            gate = ctx.gate("flag", canonical)
            if gate is None and (early := pre_table_removals().get(canonical)) is not None:
                yield self._removed_before_tables(ctx, opt, early)
                continue
            if not _removed(gate, ctx):
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


def _vllm_env(ctx: RuleContext) -> list[str]:
    return [name for name in ctx.config.env if name.startswith("VLLM_")]


@register
class UnknownEnvVar(ConfigRule):
    """Reports a `VLLM_*` environment variable the target release never reads.

    What
    ----
    An environment variable named `VLLM_*` that is neither in the target release's
    `envs.py` nor read elsewhere in its source (deprecated reads included).

    Why
    ---
    vLLM silently ignores it: the setting the operator believes is active is not.

    Example
    -------
    `VLLM_USE_FASTSAFETENSOR=1` (never existed; use `--load-format fastsafetensors`).

    Fix
    ---
    Remove it, or use the suggested variable or flag.

    Releases
    --------
    Data-driven: `env_vars` per release and `first_seen` in the index.
    """

    code = "VG010"
    name = "unknown-env-var"
    default_severity = Severity.warning
    summary = "VLLM_* environment variable not read by the target release"
    references = (ENVS_032,)
    since = "0.1.0"

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        known = ctx.env_var_facts
        for name in _vllm_env(ctx):
            if name in known:
                continue
            gate = ctx.gate("env_var", name)
            if _removed(gate, ctx):
                continue  # removed-env-var reports it
            if (later := _first_seen_later(gate, ctx)) is not None:
                message = (
                    f"`{name}` is not read by vLLM {ctx.version}: it first appears in {later}."
                )
            else:
                message = (
                    f"`{name}` is not an environment variable of vLLM {ctx.version}; it is ignored."
                    + (did_you_mean(name, known))
                )
            yield self.finding(message, flag=name, location=ctx.config.env[name].location)


@register
class RemovedEnvVar(ConfigRule):
    """Reports a `VLLM_*` environment variable removed at or before the target release.

    What
    ----
    An environment variable an earlier release read and the target release no longer does.

    Why
    ---
    It silently does nothing, so the behaviour it used to set is back to the default.

    Example
    -------
    `VLLM_PREFIX_CACHE_RETENTION_INTERVAL=64` on 0.30.0 or later (use
    `--prefix-cache-retention-interval`).

    Fix
    ---
    Remove it and use the replacement named in the message.

    Releases
    --------
    Data-driven: `gone_at` and `replacement` for env vars in `rules/releases/index.json`.
    """

    code = "VG011"
    name = "removed-env-var"
    default_severity = Severity.warning
    summary = "VLLM_* environment variable removed at or before the target release"
    references = (
        vllm_source(
            "0.29.0",
            "vllm/envs.py",
            "vllm/envs.py at 0.29.0, the last with VLLM_PREFIX_CACHE_RETENTION_INTERVAL",
        ),
        ENVS_032,
    )
    since = "0.1.0"

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        known = ctx.env_var_facts
        for name in _vllm_env(ctx):
            gate = ctx.gate("env_var", name)
            if name in known or not _removed(gate, ctx):
                continue
            message = (
                f"`{name}` was removed in vLLM {gate.gone_at} and does nothing on {ctx.version}."
            )
            if gate.replacement:
                message += f" Use `{gate.replacement}`."
            yield self.finding(
                message,
                flag=name,
                location=ctx.config.env[name].location,
                gone_at=gate.gone_at,
                replacement=gate.replacement,
            )


@register
class DeprecatedEnvVar(ConfigRule):
    """Reports a `VLLM_*` environment variable read only through a deprecation path.

    What
    ----
    An environment variable the target release still reads but marks deprecated.

    Why
    ---
    The next release may ignore it; the supported spelling is usually a flag.

    Example
    -------
    `VLLM_PREFIX_CACHE_RETENTION_INTERVAL` on 0.29.0 (read through
    `get_from_deprecated_env_if_set`).

    Fix
    ---
    Move the setting to the replacement named in the message.

    Releases
    --------
    Data-driven: `deprecated` and `replacement` per env var in `rules/releases/<version>.json`.
    """

    code = "VG012"
    name = "deprecated-env-var"
    default_severity = Severity.warning
    summary = "VLLM_* environment variable deprecated at the target release"
    references = (
        vllm_source(
            "0.29.0",
            "vllm/envs.py",
            "vllm/envs.py at 0.29.0: deprecated env vars read with a warning",
        ),
    )
    since = "0.1.0"

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        for name in _vllm_env(ctx):
            fact = ctx.env_var_facts.get(name)
            if fact is None or not fact.deprecated:
                continue
            message = f"`{name}` is deprecated in vLLM {ctx.version}."
            if fact.replacement:
                message += f" Use `{fact.replacement}`."
            yield self.finding(message, flag=name, location=ctx.config.env[name].location)


def _configured_connectors(ctx: RuleContext) -> list[str]:
    """Registered connector names written in ``--kv-transfer-config`` (MultiConnector
    children included; a child loaded by its own ``kv_connector_module_path`` is not)."""
    name = ctx.kv_transfer_config.get("kv_connector")
    names = [name] if isinstance(name, str) and name else []
    conn = ctx.connector
    if conn is not None and conn.via == "kv-transfer-config":
        external = set(ctx.external_connectors)
        names.extend(child for child in conn.children if child not in external)
    return names


def _transfer_config_is_used(ctx: RuleContext) -> bool:
    """False when an offload flag overwrites ``kv_connector``
    (kv-offloading-size-overwrites... reports it)."""
    return ctx.backend_mapping is None and "kv_connector_module_path" not in ctx.kv_transfer_config


@register
class UnknownConnector(ConfigRule):
    """Reports a `kv_connector` the target release's connector factory does not register.

    What
    ----
    `--kv-transfer-config` names a connector (also inside MultiConnector's `connectors`
    list) that is not registered in `KVConnectorFactory` at the target release.

    Why
    ---
    The factory raises at startup; a misspelt connector name fails only after the
    engine begins to initialise.

    Example
    -------
    `{"kv_connector": "LMCacheConnector"}` (registered name: `LMCacheConnectorV1`);
    `HiSparseConnector` before 0.30.0.

    Fix
    ---
    Use the suggested name, or a release that has the connector. Connectors (or
    MultiConnector children) loaded with `kv_connector_module_path` are not checked.

    Images that patch connectors into the factory are read from the curated
    `rules/curated/plugin_images.toml`: AIBrix's images register
    `AIBrixOffloadingConnectorV1Type1/2/3` and `AIBrixPDReuseConnector`, so those are not
    reported there; on a known image without them (`vllm/vllm-openai`) they stay errors.
    Where the image cannot be placed (none named, or one kvtool does not know) a
    connector that only a plugin registers, or an unknown name with no close registered
    spelling, is info: a plugin may register it, and kvtool could not check.

    Releases
    --------
    Data-driven: `connectors` per release and `first_seen` in the index.
    """

    code = "VG020"
    name = "unknown-connector"
    default_severity = Severity.error
    summary = "KV connector not registered at the target vLLM release"
    fix_applicability = "display"
    references = (
        CONNECTOR_FACTORY_032,
        Reference(
            url="https://github.com/vllm-project/aibrix/blob/main/python/aibrix_kvcache/integration/vllm/patches/vllm_v0.10.2-aibrix-kvcache.patch",
            note="AIBrix patches AIBrixOffloadingConnectorV1Type1/2/3 into the connector factory",
        ),
    )
    since = "0.1.0"
    other_severities = (Severity.info,)

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        if not _transfer_config_is_used(ctx):
            return
        registered = [c.name for c in ctx.facts.connectors]
        bundled = image_plugin(ctx)
        for name in _configured_connectors(ctx):
            if name in registered or (bundled is not None and name in bundled.connectors):
                continue  # the release registers it, or the image patches it in
            gate = ctx.gate("connector", name)
            if _removed(gate, ctx):
                continue  # removed-connector reports it
            severity: Severity | None = None
            if (later := _first_seen_later(gate, ctx)) is not None:
                message = (
                    f"Connector `{name}` is not registered in vLLM {ctx.version}: "
                    f"it first appears in {later}."
                )
            elif plugins := registering(name):
                message, severity = _plugin_connector(ctx, name, plugins)
            else:
                suggestion = did_you_mean_connector(name, registered)
                message = f"Connector `{name}` is not registered in vLLM {ctx.version}." + (
                    suggestion
                )
                if not suggestion and image_is_unplaced(ctx):
                    severity = Severity.info
                    message += (
                        f" kvtool does not know the image `{ctx.config.invocation.image}`: a "
                        "plugin package in it may register the connector (vLLM's "
                        "`vllm.general_plugins` entry points run before the factory is "
                        "asked), so whether it is missing was not checked."
                    )
            yield self.finding(
                message,
                flag=f"{KV_TRANSFER_CONFIG}.kv_connector",
                location=ctx.location_of(KV_TRANSFER_CONFIG),
                severity=severity,
            )


def _plugin_connector(
    ctx: RuleContext, name: str, plugins: tuple[PluginImage, ...]
) -> tuple[str, Severity | None]:
    """The message for a connector that only a distribution's images register: an error on
    an image kvtool knows to be without it, info where the image cannot be placed."""
    images = ", ".join(
        f"`{p.repository}`" + (f" (tags with `{p.tag_contains}`)" if p.tag_contains else "")
        for p in plugins
    )
    base = (
        f"Connector `{name}` is not registered by vLLM {ctx.version} itself; "
        f"{plugins[0].plugin} patches it into vLLM's connector factory in its images "
        f"({images}; {plugins[0].source.split(' ', 1)[0]})."
    )
    image = ctx.config.invocation.image
    if image is None or image_is_unplaced(ctx) or image_may_bundle(ctx):
        where = f"the image `{image}`" if image else "the installation this command runs in"
        return (
            base + f" kvtool cannot tell whether {where} carries that patch, so this was "
            "not checked.",
            Severity.info,
        )
    return (
        base + f" The image `{image}` is not one of them: the factory raises "
        f"`Unsupported connector type` at startup.",
        None,
    )


@register
class RemovedConnector(ConfigRule):
    """Reports a `kv_connector` removed from the factory at or before the target release.

    What
    ----
    A connector that earlier releases registered and the target release does not.

    Why
    ---
    The factory raises at startup.

    Example
    -------
    `P2pNcclConnector` on 0.24.0 or later. Migrate to `NixlConnector`, or to the native `p2p`
    tier, which only exists from 0.25.0.

    Fix
    ---
    Switch to the replacement named in the message.

    Releases
    --------
    Data-driven: `gone_at` and `replacement` for connectors in `rules/releases/index.json`.
    """

    code = "VG021"
    name = "removed-connector"
    default_severity = Severity.error
    summary = "KV connector removed at or before the target vLLM release"
    references = (vllm_pr(44854, "P2pNcclConnector removed (0.24.0)"), CONNECTOR_FACTORY_032)
    since = "0.1.0"

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        if not _transfer_config_is_used(ctx):
            return
        registered = {c.name for c in ctx.facts.connectors}
        for name in _configured_connectors(ctx):
            gate = ctx.gate("connector", name)
            if name in registered or not _removed(gate, ctx):
                continue
            message = f"Connector `{name}` was removed in vLLM {gate.gone_at}."
            if gate.replacement:
                message += f" Use {gate.replacement}."
            yield self.finding(
                message,
                flag=f"{KV_TRANSFER_CONFIG}.kv_connector",
                location=ctx.location_of(KV_TRANSFER_CONFIG),
                gone_at=gate.gone_at,
            )


@register
class UnknownKvTransferConfigKey(ConfigRule):
    """Reports a `--kv-transfer-config` key that the target release rejects.

    What
    ----
    A top-level key of the `--kv-transfer-config` JSON that is not a `KVTransferConfig`
    field at a release whose config classes forbid unknown keys.

    Why
    ---
    From 0.16.0 config dataclasses are pydantic `extra="forbid"`: the JSON fails at parse
    time. 0.32.0 removed `kv_buffer_size`, `kv_rank`, `kv_parallel_size` and `kv_ip`, so
    legacy P2P-NCCL JSON fails there.

    Example
    -------
    `{"kv_connector": "NixlConnector", "kv_buffer_size": 5e9}` on 0.32.0.

    Fix
    ---
    Delete the key, or use the suggested field.

    Releases
    --------
    Data-driven: `kv_transfer_config_fields` and `kv_transfer_config_forbids_extra` per release.
    """

    code = "VG030"
    name = "unknown-kv-transfer-config-key"
    default_severity = Severity.error
    summary = "--kv-transfer-config key rejected by the target vLLM release"
    references = (KV_TRANSFER_CONFIG_032,)
    since = "0.1.0"

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        if (
            not ctx.facts.kv_transfer_config_forbids_extra
            or not ctx.facts.kv_transfer_config_fields
        ):
            return
        fields = [f.name for f in ctx.facts.kv_transfer_config_fields]
        for key in ctx.kv_transfer_config:
            if key in fields:
                continue
            yield self.finding(
                f"`{key}` is not a KVTransferConfig field in vLLM {ctx.version}, which "
                "rejects unknown "
                "keys at parse time." + did_you_mean(key, fields),
                flag=f"{KV_TRANSFER_CONFIG}.{key}",
                location=ctx.location_of(KV_TRANSFER_CONFIG),
            )


# Strings pydantic's lax mode turns into a bool (its documented conversion table).
_BOOL_STRINGS = frozenset({"0", "1", "true", "false", "t", "f", "yes", "no", "y", "n", "on", "off"})


def _lax_accepts(base: str, value: object) -> bool | None:
    """Whether pydantic's lax mode accepts ``value`` for the plain type ``base``, or None
    when the annotation is not one kvtool can judge (aliases, unions of models, ...)."""
    if base == "str":
        return isinstance(value, str)
    if base == "bool":
        return isinstance(value, bool | int) or (
            isinstance(value, str) and value.strip().lower() in _BOOL_STRINGS
        )
    if base in ("int", "float"):
        if isinstance(value, bool | int) or (isinstance(value, float) and base == "float"):
            return True
        if isinstance(value, float):
            return value.is_integer()
        if isinstance(value, str):
            try:
                number = float(value)
            except ValueError:
                return False
            return base == "float" or number.is_integer()
        return False
    if base.startswith("dict["):
        return isinstance(value, dict)
    if base.startswith("list["):
        return isinstance(value, list)
    return None


def kv_transfer_value_problem(
    annotation: str, choices: tuple[str, ...] | None, value: object
) -> str | None:
    """Why ``value`` fails a ``KVTransferConfig`` field annotated ``annotation``, or None.

    ``choices`` (Literal fields and aliases such as ``KVRole``) are checked first; other
    annotations only when they are a plain type, optionally ``| None``.
    """
    parts = [part.strip() for part in annotation.split("|")]
    optional = "None" in parts
    if value is None:
        return None if optional or (choices is not None and "None" in choices) else "null"
    if choices is not None:
        return None if isinstance(value, str) and value in choices else "choice"
    bases = [part for part in parts if part != "None"]
    if len(bases) != 1:
        return None
    accepted = _lax_accepts(bases[0], value)
    return None if accepted is None or accepted else "type"


@register
class KvTransferConfigValueType(ConfigRule):
    """Reports a `--kv-transfer-config` value the target release's field type rejects.

    What
    ----
    A top-level `--kv-transfer-config` key whose value does not fit the `KVTransferConfig`
    field's type at the target release: a number where a string is expected
    (`"kv_connector": 5`), text where a port number is expected, a `kv_role` or
    `kv_load_failure_policy` outside its choices, or `null` for a field that is not optional.

    Why
    ---
    From the release where config classes are validated pydantic dataclasses (the same
    release that starts rejecting unknown keys, 0.16.0), such a value stops the server at
    argument parsing with a validation error, after the image has been pulled and started.

    Example
    -------
    `{"kv_connector": "NixlConnector", "kv_role": "both", "kv_port": "auto"}` on 0.32.0.

    Fix
    ---
    Write the value with the field's type, or one of the listed choices.

    Releases
    --------
    Data-driven: field annotations and choices from `kv_transfer_config_fields`; checked where
    `kv_transfer_config_forbids_extra` is true. Lax-mode conversions pydantic performs
    (`"14579"` for an int, `"true"` for a bool) are accepted; annotations kvtool cannot judge
    are skipped rather than guessed.
    """

    code = "VG032"
    name = "kv-transfer-config-value-type"
    default_severity = Severity.error
    summary = "--kv-transfer-config value of the wrong type for the target vLLM release"
    references = (
        KV_TRANSFER_CONFIG_032,
        Reference(
            "https://docs.pydantic.dev/latest/concepts/conversion_table/",
            "pydantic's conversion table (how the config's values are coerced)",
        ),
    )
    since = "0.1.0"

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        if not ctx.facts.kv_transfer_config_forbids_extra:
            return
        fields = {f.name: f for f in ctx.facts.kv_transfer_config_fields}
        for key, value in ctx.kv_transfer_config.items():
            field = fields.get(key)
            if field is None:
                continue  # VG030's finding
            problem = kv_transfer_value_problem(field.annotation, field.choices, value)
            if problem is None:
                continue
            expected = (
                "one of " + ", ".join(f"`{c}`" for c in field.choices)
                if field.choices is not None
                else f"`{field.annotation}`"
            )
            yield self.finding(
                f"`{key}` is {json.dumps(value)} but vLLM {ctx.version} expects {expected}; "
                "the server stops at argument parsing.",
                flag=f"{KV_TRANSFER_CONFIG}.{key}",
                location=ctx.location_of(KV_TRANSFER_CONFIG),
            )


@register
class UnknownOffloadTier(ConfigRule):
    """Reports an offload spec or secondary tier type the target release does not register.

    What
    ----
    `kv_connector_extra_config.spec_name` not registered in `v1/kv_offload/factory.py`, or a
    `secondary_tiers[].type` not registered in the tiering factory at the target release.

    Why
    ---
    OffloadingConnector fails to build its spec at startup. Tier names changed: the
    filesystem tier is `fs_python` on 0.22.x and `fs` from 0.23.0; `obj` needs 0.23.0,
    `p2p` 0.25.0, `kvcr` 0.30.0.

    Example
    -------
    `"secondary_tiers": [{"type": "fs", ...}]` on 0.22.0.

    Fix
    ---
    Use a tier type the release registers (the message lists them).

    Releases
    --------
    Data-driven: `offload_specs` and `offload_tiers` per release.
    """

    code = "VG031"
    name = "unknown-offload-tier"
    default_severity = Severity.error
    summary = "offload spec or tier type not registered at the target vLLM release"
    references = (
        vllm_pr(40020, "the multi-tier offloading framework (0.22.0)"),
        vllm_pr(41735, "the Python filesystem tier (fs_python on 0.22.x)"),
        vllm_pr(41968, "the object-store tier (0.23.0)"),
    )
    since = "0.1.0"

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        extra = ctx.extra_config
        location = ctx.location_of(KV_TRANSFER_CONFIG)
        spec = extra.get("spec_name")
        if (
            isinstance(spec, str)
            and ctx.facts.offload_specs
            and spec not in ctx.facts.offload_specs
        ):
            yield self.finding(
                f"Offload spec `{spec}` is not registered in vLLM {ctx.version}."
                + did_you_mean(spec, ctx.facts.offload_specs),
                flag="kv_connector_extra_config.spec_name",
                location=location,
            )
        tiers = extra.get("secondary_tiers")
        if not isinstance(tiers, list) or not ctx.facts.offload_tiers:
            return
        registered = ", ".join(f"`{t}`" for t in ctx.facts.offload_tiers)
        for tier in tiers:
            kind = tier.get("type") if isinstance(tier, dict) else None
            if not isinstance(kind, str) or kind in ctx.facts.offload_tiers:
                continue
            gate = ctx.gate("tier", kind)
            when = ""
            if (later := _first_seen_later(gate, ctx)) is not None:
                when = f" (it first appears in {later})"
            yield self.finding(
                f"Offload tier type `{kind}` is not registered in vLLM {ctx.version}{when}; "
                "registered: "
                f"{registered}." + did_you_mean(kind, ctx.facts.offload_tiers),
                flag="kv_connector_extra_config.secondary_tiers.type",
                location=location,
            )
