"""LZ: lazy offload keys (``lmcache.mp.*``) in ``kv_connector_extra_config``.

The keys, defaults and ranges are LMCache 0.5.6's (its ``lmcache_mp_connector.py`` and
``lazy_offload_policy/``, cited in :mod:`kvtool.audit.references`); the known key list
and policy names live in ``rules/audit/semantics.toml``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from kvtool.audit.context import KV_TRANSFER_CONFIG, RuleContext
from kvtool.audit.model import Finding, Severity
from kvtool.audit.references import (
    EVICTION_AWARE_PR,
    LAZY_EVICTION_AWARE,
    LAZY_FIFO,
    LAZY_MANAGER,
    LAZY_POLICIES,
    LMCACHE_MP_CONNECTOR,
)
from kvtool.audit.registry import ConfigRule, register
from kvtool.audit.rules._common import did_you_mean

PREFIX = "lmcache.mp."
LAZY = "lmcache.mp.lazy_offload"
POLICY = "lmcache.mp.lazy_offload_policy"
THRESHOLD = "lmcache.mp.lazy_offload_threshold"
SELECT_COUNT = "lmcache.mp.lazy_offload_select_count"
HORIZON = "lmcache.mp.lazy_offload_horizon_steps"
MAX_DRAIN = "lmcache.mp.lazy_offload_max_drain_per_step"
DEFERRAL = "lmcache.mp.lazy_offload_max_deferral_seconds"

# LMCache 0.5.6 defaults (lazy_offload_policy/fifo.py and eviction_aware.py).
DEFAULT_POLICY = "EVICTION_AWARE"
DEFAULT_FIFO_THRESHOLD = 100
# Published FIFO runs lost every store to eviction at threshold 100 and still lost to
# EVICTION_AWARE at threshold 10 (LMCache PR #4847's measurements); below this it can drain in time.
FIFO_THRESHOLD_NEVER_DRAINS = 10


def _lmcache_keys(ctx: RuleContext) -> dict[str, Any]:
    return {k: v for k, v in ctx.extra_config.items() if k.startswith(PREFIX)}


def _truthy(value: Any) -> bool:
    """How LMCache reads the flag: Python truthiness of the raw JSON value."""
    return bool(value)


def _lazy_on(ctx: RuleContext) -> bool:
    return _truthy(ctx.extra_config.get(LAZY, False))


def _policy(ctx: RuleContext) -> Any:
    return ctx.extra_config.get(POLICY, DEFAULT_POLICY)


def _as_int(value: Any) -> int | None:
    """LMCache's ``int(...)`` of a FIFO knob: strings of digits and floats (truncated) pass."""
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: int(float("inf"))
        return None


def _as_float(value: Any) -> float | None:
    try:
        result = float(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: float(10**400)
        return None
    return result if math.isfinite(result) else None


def _location(ctx: RuleContext) -> Any:
    return ctx.location_of(KV_TRANSFER_CONFIG)


@register
class UnknownLmcacheMpKey(ConfigRule):
    """Reports an `lmcache.mp.*` key LMCacheMPConnector does not read.

    What
    ----
    A `kv_connector_extra_config` key starting with `lmcache.mp.` that is not one of the
    connector's documented keys; the closest key is suggested.

    Why
    ---
    Unknown keys are silently ignored: a typo in `lmcache.mp.lazy_offload_threshold` leaves the
    default of 100 in force.

    Example
    -------
    `"lmcache.mp.lazy_offload_treshold": 20`.

    Fix
    ---
    Use the suggested key.

    Releases
    --------
    LMCache 0.5.6 key set (`rules/audit/semantics.toml`, `[lmcache_mp]`) and the
    `mp_keys` of every release in `rules/lmcache/` (generated from LMCache's wheels).
    """

    code = "LZ001"
    name = "unknown-lmcache-mp-key"
    default_severity = Severity.warning
    summary = "lmcache.mp.* key not read by LMCacheMPConnector"
    fix_applicability = "display"
    references = (LMCACHE_MP_CONNECTOR, EVICTION_AWARE_PR)
    since = "0.1.0"

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        keys = _lmcache_keys(ctx)
        if not keys:
            return
        from kvtool import lmcache

        # The curated 0.5.6 list plus every key the generated LMCache tables read.
        known = tuple(sorted(set(ctx.semantics.lmcache_mp_keys) | lmcache.known("mp_keys")))
        for key in keys:
            if key in known or any(key.startswith(k + ".") for k in known):
                continue
            yield self.finding(
                f"`{key}` is not a key LMCacheMPConnector reads; it is ignored."
                + did_you_mean(key, known),
                flag=key,
                location=_location(ctx),
            )


@register
class UnknownLazyOffloadPolicy(ConfigRule):
    """Reports an `lmcache.mp.lazy_offload_policy` that is not a policy name.

    What
    ----
    The policy name is matched exactly and case-sensitively against `EVICTION_AWARE` and `FIFO`.

    Why
    ---
    The scheduler raises `ValueError: Unknown offload policy: <name>` when it binds its KV cache
    manager: vLLM fails after model loading. `"fifo"` fails.

    Example
    -------
    `"lmcache.mp.lazy_offload_policy": "fifo"`.

    Fix
    ---
    Use `EVICTION_AWARE` (the default) or `FIFO`.

    Releases
    --------
    LMCache 0.5.6 policy names.
    """

    code = "LZ002"
    name = "unknown-lazy-offload-policy"
    default_severity = Severity.error
    summary = "lazy offload policy name LMCache does not know"
    references = (LAZY_POLICIES,)
    since = "0.1.0"

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        if POLICY not in ctx.extra_config:
            return
        policy = ctx.extra_config[POLICY]
        names = ctx.semantics.lazy_offload_policies
        if isinstance(policy, str) and policy in names:
            return
        hint = did_you_mean(str(policy).upper(), names) if isinstance(policy, str) else ""
        yield self.finding(
            f"`{POLICY}` `{policy}` is not a policy (names are case-sensitive: "
            f"{', '.join(names)}); startup fails with `Unknown offload policy`." + hint,
            flag=POLICY,
            location=_location(ctx),
        )


@register
class FifoKnobNotPositive(ConfigRule):
    """Reports FIFO knobs that are not positive integers.

    What
    ----
    `lmcache.mp.lazy_offload_threshold` or `lmcache.mp.lazy_offload_select_count` is zero,
    negative or not an integer.

    Why
    ---
    LMCache does not range-check them: `threshold <= 0` drains whenever one request is
    eligible, `select_count <= 0` drains exactly one request per trigger, and a non-numeric
    value raises `ValueError` from `int()` at startup.

    Example
    -------
    `"lmcache.mp.lazy_offload_select_count": 0`.

    Fix
    ---
    Use positive integers.

    Releases
    --------
    LMCache 0.5.6 FIFO policy.
    """

    code = "LZ003"
    name = "fifo-knob-not-positive"
    default_severity = Severity.warning
    summary = "FIFO threshold or select count is not a positive integer"
    references = (LAZY_FIFO, LMCACHE_MP_CONNECTOR)
    since = "0.1.0"
    other_severities = (Severity.error,)

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        if _policy(ctx) != "FIFO":
            return
        for key in (THRESHOLD, SELECT_COUNT):
            if key not in ctx.extra_config:
                continue
            raw = ctx.extra_config[key]
            value = _as_int(raw)
            if value is None or isinstance(raw, bool):
                yield self.finding(
                    f"`{key}` `{raw}` is not an integer: LMCache's `int()` raises at startup.",
                    flag=key,
                    location=_location(ctx),
                    severity=Severity.error,
                )
            elif value <= 0:
                meaning = (
                    "drains whenever one finished request is buffered"
                    if key == THRESHOLD
                    else "drains exactly one request per trigger"
                )
                yield self.finding(
                    f"`{key}` {raw} is accepted unchecked and {meaning}.",
                    flag=key,
                    location=_location(ctx),
                )


@register
class EvictionAwareKnobOutOfRange(ConfigRule):
    """Reports EVICTION_AWARE knobs outside the ranges LMCache enforces.

    What
    ----
    `horizon_steps` must be > 0, `max_drain_per_step` >= 1 after `int(float(x))`, and
    `max_deferral_seconds` >= 0; each must be a number.

    Why
    ---
    The policy raises `ValueError` (e.g. `max_drain_per_step must be >= 1`) when the scheduler
    binds its block pool: startup fails after the model loaded. `"0.5"` for
    `max_drain_per_step` truncates to 0 and fails.

    Example
    -------
    `"lmcache.mp.lazy_offload_horizon_steps": 0`.

    Fix
    ---
    Use values in range (defaults: 2.5, 64, 0.0).

    Releases
    --------
    LMCache 0.5.6 EVICTION_AWARE policy.
    """

    code = "LZ004"
    name = "eviction-aware-knob-out-of-range"
    default_severity = Severity.error
    summary = "EVICTION_AWARE knob outside the range LMCache accepts"
    references = (LAZY_EVICTION_AWARE,)
    since = "0.1.0"

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        if _policy(ctx) != "EVICTION_AWARE":
            return
        extra = ctx.extra_config
        if HORIZON in extra:
            horizon = _as_float(extra[HORIZON])
            if horizon is None or horizon <= 0:
                yield self._bad(ctx, HORIZON, extra[HORIZON], "must be a number > 0")
        if MAX_DRAIN in extra:
            as_float = _as_float(extra[MAX_DRAIN])
            if as_float is None or int(as_float) < 1:
                yield self._bad(
                    ctx, MAX_DRAIN, extra[MAX_DRAIN], "must be >= 1 after int(float(x))"
                )
        if DEFERRAL in extra:
            deferral = _as_float(extra[DEFERRAL])
            if deferral is None or deferral < 0:
                yield self._bad(ctx, DEFERRAL, extra[DEFERRAL], "must be a number >= 0")

    def _bad(self, ctx: RuleContext, key: str, value: Any, rule: str) -> Finding:
        return self.finding(
            f"`{key}` {value!r} {rule}; LMCache raises ValueError when the scheduler starts.",
            flag=key,
            location=_location(ctx),
        )


@register
class LazyOffloadWithoutPrefixCaching(ConfigRule):
    """Reports `lmcache.mp.lazy_offload` with prefix caching off.

    What
    ----
    Lazy offload is on while `--no-enable-prefix-caching` is passed.

    Why
    ---
    Lazy offload validates buffered blocks by their prefix-cache hashes; LMCacheMPConnector
    raises `ValueError: lmcache.mp.lazy_offload requires vLLM prefix caching` at construction.

    Example
    -------
    `--no-enable-prefix-caching` with `"lmcache.mp.lazy_offload": true`.

    Fix
    ---
    Remove `--no-enable-prefix-caching`.

    Releases
    --------
    LMCache 0.5.6 with vLLM 0.32.
    """

    code = "LZ005"
    name = "lazy-offload-without-prefix-caching"
    default_severity = Severity.error
    summary = "lazy offload needs prefix caching"
    references = (LAZY_MANAGER,)
    since = "0.1.0"

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        if not _lazy_on(ctx) or not ctx.prefix_caching_off:
            return
        yield self.finding(
            f"`{LAZY}` requires prefix caching; LMCacheMPConnector raises ValueError at startup.",
            flag=LAZY,
            location=ctx.location_of("--enable-prefix-caching"),
        )


@register
class FifoNeverDrainsBeforeEviction(ConfigRule):
    """Reports FIFO lazy offload with a threshold that lets blocks be evicted before they drain.

    What
    ----
    The FIFO policy drains only once `threshold` finished requests are buffered. Meanwhile their
    GPU blocks sit unpinned in vLLM's free queue and are recycled.

    Why
    ---
    Published runs: FIFO 100/10 stored nothing in 30 minutes (all 330 drained requests failed
    revalidation, 0 % external hits); GSM8K cached pass with 0 L1 objects; tuned 10/10 still
    lost to EVICTION_AWARE (coverage 0.715 vs 0.933). Below the threshold the tail never drains.

    Example
    -------
    `"lmcache.mp.lazy_offload_policy": "FIFO"` with the default threshold (100).

    Fix
    ---
    Use the default EVICTION_AWARE policy (drop `lmcache.mp.lazy_offload_policy`).

    Releases
    --------
    LMCache 0.5.6 FIFO policy.
    """

    code = "LZ006"
    name = "fifo-never-drains-before-eviction"
    default_severity = Severity.warning
    summary = "FIFO lazy offload threshold too high to drain before eviction"
    references = (LAZY_FIFO, EVICTION_AWARE_PR)
    since = "0.1.0"

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        if not _lazy_on(ctx) or _policy(ctx) != "FIFO":
            return
        threshold = _as_int(ctx.extra_config.get(THRESHOLD, DEFAULT_FIFO_THRESHOLD))
        if threshold is None or threshold < FIFO_THRESHOLD_NEVER_DRAINS:
            return
        yield self.finding(
            f"FIFO waits for {threshold} finished requests before draining; their unpinned "
            "GPU blocks are "
            "usually recycled first (published FIFO 100/10 runs stored nothing). Use "
            "EVICTION_AWARE.",
            flag=POLICY,
            location=_location(ctx),
            threshold=threshold,
        )


@register
class LazyOffloadValueIsString(ConfigRule):
    """Reports `lmcache.mp.lazy_offload` given as a string.

    What
    ----
    LMCache reads `lmcache.mp.lazy_offload` with Python truthiness and no type check.

    Why
    ---
    Any non-empty string is true: `"false"` turns lazy offload on.

    Example
    -------
    `"lmcache.mp.lazy_offload": "false"`.

    Fix
    ---
    Use a JSON boolean (`true` / `false`).

    Releases
    --------
    LMCache 0.5.6.
    """

    code = "LZ007"
    name = "lazy-offload-value-is-string"
    default_severity = Severity.warning
    summary = "lmcache.mp.lazy_offload given as a string is always on"
    references = (LMCACHE_MP_CONNECTOR,)
    since = "0.1.0"

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        value = ctx.extra_config.get(LAZY)
        if not isinstance(value, str):
            return
        state = "on" if _truthy(value) else "off"
        yield self.finding(
            f"`{LAZY}` is the string {value!r}, which LMCache reads as {state}; use a JSON "
            "boolean.",
            flag=LAZY,
            location=_location(ctx),
        )


@register
class LazyOffloadKnobsIgnored(ConfigRule):
    """Reports lazy offload knobs that have no effect.

    What
    ----
    Policy knobs are set while `lmcache.mp.lazy_offload` is off, knobs of the other policy are
    set (EVICTION_AWARE ignores FIFO's threshold and select count, and vice versa), or
    `lmcache.mp.*` keys are given to a connector other than LMCacheMPConnector.

    Why
    ---
    The operator believes they tuned something that is not in force.

    Example
    -------
    `"lmcache.mp.lazy_offload_threshold": 20` without `"lmcache.mp.lazy_offload": true`.

    Fix
    ---
    Turn lazy offload on, pick the policy the knobs belong to, or remove them.

    Releases
    --------
    LMCache 0.5.6.
    """

    code = "LZ008"
    name = "lazy-offload-knobs-ignored"
    default_severity = Severity.warning  # it runs, but the tuning the operator wants is off
    summary = "lazy offload knobs that have no effect"
    references = (LAZY_EVICTION_AWARE, LMCACHE_MP_CONNECTOR)
    since = "0.1.0"

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        keys = _lmcache_keys(ctx)
        if not keys:
            return
        conn = ctx.connector
        if conn is None or "LMCacheMPConnector" not in conn.names:
            name = conn.name if conn else "no connector"
            yield self.finding(
                "`lmcache.mp.*` keys are read only by LMCacheMPConnector; this config uses "
                f"{name}.",
                flag=next(iter(keys)),
                location=_location(ctx),
            )
            return
        knobs = [k for k in keys if k.startswith(LAZY + "_")]
        if knobs and not _lazy_on(ctx):
            yield self.finding(
                f"`{knobs[0]}` has no effect: `{LAZY}` is not on.",
                flag=knobs[0],
                location=_location(ctx),
            )
            return
        policy = _policy(ctx)
        other = {
            "FIFO": (HORIZON, MAX_DRAIN, DEFERRAL),
            "EVICTION_AWARE": (THRESHOLD, SELECT_COUNT),
        }
        for key in other.get(policy, ()) if isinstance(policy, str) else ():
            if key in keys:
                yield self.finding(
                    f"`{key}` is ignored by the {policy} policy.", flag=key, location=_location(ctx)
                )
