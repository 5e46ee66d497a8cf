"""SC: deployment checks from curated tables (``rules/curated/security.toml``,
``rules/curated/known_bugs.toml``), each row citing its advisory or issue."""

from __future__ import annotations

import re
from collections.abc import Iterable

from kvtool.audit.context import RuleContext, vtuple
from kvtool.audit.model import Finding, Severity
from kvtool.audit.registry import ConfigRule, register
from kvtool.releases.curated import KnownBug

FIELD_GUIDE = "shared/seeds/004_6693fa353686f930.txt"


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

    References
    ----------
    - shared/seeds/004_6693fa353686f930.txt ("Is the tag safe to run?")
    """

    code = "SC001"
    name = "below-security-floor"
    default_severity = Severity.error
    summary = "target vLLM release has a published vulnerability fixed later"
    fix_applicability = "display"
    references = (f"{FIELD_GUIDE} (Is the tag safe to run?)",)
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


def _bug_matches(ctx: RuleContext, bug: KnownBug) -> bool:
    """Every condition the row sets holds (see ``KnownBug``); unset conditions are ignored."""
    if any(ctx.option(flag) is None for flag in bug.when_flags):
        return False
    in_use = set(ctx.connector_names)
    if bug.when_connectors and not in_use & set(bug.when_connectors):
        return False
    for name, wanted in bug.when_env.items():
        value = ctx.env_value(name)
        if value is None or value.lower() != wanted.lower():
            return False
    if bug.when_offload and not in_use & set(ctx.semantics.offload_connectors):
        return False
    if bug.when_model and not re.search(bug.when_model, ctx.config.model or ""):
        return False
    return not (bug.when_hybrid and not (ctx.model is not None and ctx.model.hybrid))


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

    References
    ----------
    - shared/seeds/004_6693fa353686f930.txt ("Known bugs to check before recommending offload")
    - shared/reference/image-inspection-and-audit-ux.md §F item 10
    """

    code = "SC002"
    name = "known-bug"
    default_severity = Severity.warning
    summary = "a known bug matches this release and config"
    fix_applicability = "display"
    references = (
        f"{FIELD_GUIDE} (Known bugs)",
        "shared/reference/image-inspection-and-audit-ux.md §F item 10",
    )

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        for bug in ctx.semantics.bugs_at(ctx.version):
            if not _bug_matches(ctx, bug):
                continue
            flag = bug.when_flags[0] if bug.when_flags else None
            fixed = f" (fixed in {bug.fixed})" if bug.fixed else ""
            yield self.finding(
                f"{bug.id}{fixed}: {bug.title}. Avoid: {bug.avoidance}",
                flag=flag,
                location=ctx.location_of(flag) if flag else None,
                bug=bug.id,
                source=bug.source,
            )
