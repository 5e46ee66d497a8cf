"""SC: deployment checks from curated tables (``rules/curated/security.toml``,
``rules/curated/known_bugs.toml``), each row citing its advisory or issue."""

from __future__ import annotations

import re
from collections.abc import Iterable

from kvtool.audit.context import RuleContext, vtuple
from kvtool.audit.model import Finding, Severity
from kvtool.audit.references import (
    lmcache_issue,
    vllm_advisory,
    vllm_issue,
)
from kvtool.audit.registry import ConfigRule, register
from kvtool.releases.curated import KnownBug


@register
class BelowSecurityFloor(ConfigRule):
    """Reports a target release with a published, fixed vulnerability.

    What
    ----
    The target vLLM release is inside the affected range of a curated advisory (CVE or GHSA)
    and older than its fixed release.

    Why
    ---
    "Bundled is not safe": an image that bundles every connector correctly can still expose
    an `--api-key` bypass or a pre-auth RCE.

    Example
    -------
    Any config targeting a release below the floor in `rules/curated/security.toml`.

    Fix
    ---
    Upgrade to at least the fixed release named in the message.

    Releases
    --------
    Curated: `rules/curated/security.toml` (affected range and fixed release per advisory).
    Reported once per run and target release: the floor is a fact about the release, so
    ten invocations on one release give one finding (on the first of them).
    """

    code = "SC001"
    name = "below-security-floor"
    default_severity = Severity.error
    summary = "target vLLM release has a published vulnerability fixed later"
    fix_applicability = "display"
    references = (
        vllm_advisory("GHSA-94f4-hr76-p5j6", "CVE-2026-48746, fixed in 0.22.0"),
        vllm_advisory("GHSA-4r2x-xpjr-7cvv", "CVE-2026-22778, fixed in 0.14.1"),
    )
    since = "0.1.0"
    security = True
    once_per_release = True

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        hits = ctx.semantics.advisories_at(ctx.version)
        if not hits:
            return
        floor = max(hits, key=lambda row: vtuple(row.fixed or "0"))
        ids = ", ".join(f"{row.id} (fixed in {row.fixed}: {row.summary})" for row in hits)
        yield self.finding(
            f"vLLM {ctx.version} is below the security floor {floor.fixed}: {ids}.",
            flag=None,
            location=None,
            advisories=[row.id for row in hits],
            sources=[row.source for row in hits],
        )


def _lmcache_release_affected(ctx: RuleContext, bug: KnownBug) -> bool:
    """An LMCache row's range is LMCache's: checked against the LMCache release when the
    settings or the input name it; without it, only rows no release has fixed apply."""
    if bug.component != "lmcache":
        return True
    if ctx.lmcache_version is None:
        return bug.fixed is None
    return bug.contains(ctx.lmcache_version.removeprefix("v"))


def _bug_matches(ctx: RuleContext, bug: KnownBug) -> bool:
    """Every condition the row sets holds (see ``KnownBug``); unset conditions are ignored."""
    if any(ctx.option(flag) is None for flag in bug.when_flags):
        return False
    in_use = set(ctx.connector_names)
    if bug.when_connectors and not in_use & set(bug.when_connectors):
        return False
    if not _env_holds(ctx, bug.when_env):
        return False
    if bug.unless_env and _env_holds(ctx, bug.unless_env):
        return False
    if bug.when_offload and not in_use & set(ctx.semantics.offload_connectors):
        return False
    if bug.when_model and not re.search(bug.when_model, ctx.config.model or ""):
        return False
    if not all(
        _matches(pattern, _option_value(ctx, path)) for path, pattern in bug.when_values.items()
    ):
        return False
    if bug.when_extra and not any(
        all(
            _matches(pattern, _extra_values(extra, path))
            for path, pattern in bug.when_extra.items()
        )
        for name, extra in ctx.connector_extra_configs
        if not bug.when_connectors or name in bug.when_connectors
    ):
        return False
    if bug.when_state_layers and not (ctx.model is not None and ctx.model.mamba):
        return False
    return not (bug.when_hybrid and not (ctx.model is not None and ctx.model.hybrid))


def _env_holds(ctx: RuleContext, wanted: dict[str, str]) -> bool:
    """Every variable of ``wanted`` is set to its value (compared case-insensitively)."""
    for name, expected in wanted.items():
        value = ctx.env_value(name)
        if value is None or value.lower() != expected.lower():
            return False
    return True


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


def _option_value(ctx: RuleContext, path: str) -> list[object]:
    """The value of ``--flag`` or of ``--flag.key.key`` in a JSON-valued flag ([] when unset)."""
    flag, _, keys = path.partition(".")
    if keys:
        return _extra_values(ctx.config.json_values.get(flag, {}), keys)
    option = ctx.option(flag)
    return [] if option is None or option.value is None else [option.value]


def _extra_values(tree: object, path: str) -> list[object]:
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


@register
class KnownBugMatches(ConfigRule):
    """Reports a known bug whose affected releases and conditions match the config.

    What
    ----
    A curated known-bug row (repository#number, affected range, the flags and connectors that
    trigger it) matches the target release and the serve config.

    Why
    ---
    These bugs crash, deadlock or silently lose cache hits; each row names how to avoid it.

    Example
    -------
    `LMCacheConnectorV1` on a hybrid-attention model (LMCache#3106).

    Fix
    ---
    Apply the avoidance in the message, or upgrade past the fixed release.

    Releases
    --------
    Curated: `rules/curated/known_bugs.toml`; rows are rechecked like the field guide's
    "Known bugs" table.
    """

    code = "SC002"
    name = "known-bug"
    default_severity = Severity.warning
    summary = "a known bug matches this release and config"
    fix_applicability = "display"
    references = (
        lmcache_issue(2942, "LocalCPUBackend.allocate() deadlocks when the buffer fills"),
        lmcache_issue(2502, "LocalDiskBackend crashes vLLM under allocation bursts"),
        vllm_issue(54831, "GLM-5.3's DSA indexer cache fails offload hash alignment"),
        vllm_issue(50454, "native offload + Mamba hybrid + mamba-cache-mode all + MTP crash"),
        vllm_issue(55503, "OffloadingConnector fs secondary tier + MTP crash"),
        lmcache_issue(3688, "LMCacheConnectorV1: an aborted request kills EngineCore"),
    )
    since = "0.1.0"

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        for bug in ctx.semantics.bugs_at(ctx.version):
            if not _lmcache_release_affected(ctx, bug) or not _bug_matches(ctx, bug):
                continue
            flag = bug.when_flags[0] if bug.when_flags else None
            fixed = f" (fixed in {bug.fixed})" if bug.fixed else ""
            if bug.component == "lmcache" and ctx.lmcache_version is not None:
                read = f" from {ctx.lmcache_origin}" if ctx.lmcache_origin else ""
                fixed += f" [LMCache {ctx.lmcache_version}{read}]"
            yield self.finding(
                f"{bug.id}{fixed}: {bug.title}. Avoid: {bug.avoidance}",
                flag=flag,
                location=ctx.location_of(flag) if flag else None,
                bug=bug.id,
                source=bug.source,
            )
