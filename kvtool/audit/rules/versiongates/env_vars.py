"""VG010-VG012: `VLLM_*` environment variables against the target release's `envs.py`."""

from __future__ import annotations

from collections.abc import Iterable

from kvtool.audit.context import RuleContext
from kvtool.audit.model import Finding, Severity
from kvtool.audit.references import ENVS_032, vllm_source
from kvtool.audit.registry import ConfigRule, register
from kvtool.audit.rules._common import did_you_mean
from kvtool.audit.rules.versiongates._gates import first_seen_later, removed_at_target


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
            if removed_at_target(gate, ctx):
                continue  # removed-env-var reports it
            if (later := first_seen_later(gate, ctx)) is not None:
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
            if name in known or not removed_at_target(gate, ctx):
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
