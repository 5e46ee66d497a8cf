"""SC: the security floor from ``rules/curated/security.toml``, each row citing its
advisory (the known-bug database is :mod:`kvtool.audit.rules.known_bugs`)."""

from __future__ import annotations

from collections.abc import Iterable

from kvtool.audit.context import RuleContext, vtuple
from kvtool.audit.model import Finding, Severity
from kvtool.audit.references import vllm_advisory
from kvtool.audit.registry import ConfigRule, register


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
