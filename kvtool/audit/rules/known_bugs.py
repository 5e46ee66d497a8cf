"""SC002: the known-bug database (``rules/bugs/``) matched against each serve config.

One rule for every record: the record's component release must be in its affected range
and its trigger must hold (:mod:`kvtool.bugdb.match`). Severity follows the record's
impact; a range the generator could not prove from source is reported one step lower and
worded "may affect". Where the input does not name the component's release (LMCache's,
NIXL's, ...), only records no release has fixed apply, at info when they start at a
known release.
"""

from __future__ import annotations

from collections.abc import Iterable

from kvtool.audit.context import RuleContext
from kvtool.audit.model import Finding, Severity
from kvtool.audit.references import Reference
from kvtool.audit.registry import ConfigRule, register
from kvtool.bugdb import BugRecord, proof_of, records, trigger_holds
from kvtool.bugdb.model import DISPLAY

_LOWER = {Severity.error: Severity.warning, Severity.warning: Severity.info}


def _component_release(ctx: RuleContext, bug: BugRecord) -> str | None:
    """The release of the bug's component this config runs, when the audit knows it."""
    if bug.component == "vllm":
        return ctx.version
    if bug.component == "lmcache":
        return ctx.lmcache_version.removeprefix("v") if ctx.lmcache_version else None
    known = ctx.component_releases.get(bug.component)
    return known.version if known is not None else None


def _release_basis(ctx: RuleContext, bug: BugRecord, release: str | None) -> str:
    """Whether the range was applied to a known release (and where it was read) or to an
    assumed one, for the finding's message."""
    if release is None:
        return (
            f" [{DISPLAY[bug.component]} release not known from the input: assumed affected, as no"
            " release fixes it]"
        )
    if bug.component == "vllm":
        return ""
    if bug.component == "lmcache":
        origin = ctx.lmcache_origin
    else:
        origin = ctx.component_releases[bug.component].origin
    read = f" from {origin}" if origin else ""
    return f" [{DISPLAY[bug.component]} {release}{read}]"


def _range_text(bug: BugRecord) -> str:
    if bug.introduced and bug.fixed:
        return f"{bug.component} {bug.introduced} to before {bug.fixed}"
    if bug.fixed:
        return f"{bug.component} before {bug.fixed}"
    if bug.introduced:
        return f"{bug.component} {bug.introduced} and later (no fixed release)"
    return f"every {bug.component} release (no fixed release)"


@register
class KnownBugMatches(ConfigRule):
    """Reports a known bug whose affected releases and trigger match the config.

    What
    ----
    A record of the known-bug database (`rules/bugs/<component>.toml`: the public report
    and fix, the affected releases, the trigger over flags, JSON keys, connector extra
    config, env, model traits, parallel sizes and image) matches the target release and
    the serve config. `kvtool rule --bugs` lists the records, `kvtool rule KB-...` shows one.

    Why
    ---
    These bugs corrupt outputs, stop the server from starting, crash it under load, or
    silently lose every cache hit; each record names how to avoid it.

    Example
    -------
    `LMCacheConnectorV1` on a hybrid-attention model (KB-LMCACHE-3106).

    Fix
    ---
    Apply the avoidance in the message, or upgrade to the fixed release.

    Releases
    --------
    Each record's range is checked against the component's wheels on both sides of each
    end by `scripts/gen_bug_ranges.py` (`rules/bugs/proofs.json` records the sha256 read).
    Severity follows the impact (error for corruption, start-up failures, crashes and OOM;
    warning for lost hits and slowdowns), one step lower ("may affect") where the range is
    not proven. Without the component's release (LMCache, NIXL, ...) in the input, only
    records no release has fixed apply.
    """

    code = "SC002"
    name = "known-bug"
    default_severity = Severity.error
    other_severities = (Severity.warning, Severity.info)
    summary = "a known bug matches this release and config"
    fix_applicability = "display"
    references = (
        Reference(
            "https://github.com/vllm-project/vllm/issues/45268",
            "a database record: mamba align mode + an external KV hit kills EngineCore",
        ),
        Reference(
            "https://github.com/LMCache/LMCache/issues/3688",
            "a database record: LMCacheConnectorV1 dies on an aborted request",
        ),
    )
    since = "0.1.0"

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        for bug in records():
            release = _component_release(ctx, bug)
            if release is not None and not bug.affects(release):
                continue
            # Without the component's release only a bug no release has fixed applies: a
            # fixed one would be reported on every deployment that may well be past it.
            if release is None and bug.fixed is not None:
                continue
            if not trigger_holds(ctx, bug.trigger):
                continue
            yield self._finding(ctx, bug, release)

    def _finding(self, ctx: RuleContext, bug: BugRecord, release: str | None) -> Finding:
        proof = proof_of(bug)
        severity = bug.impact.severity
        doubts: list[str] = []
        if proof is None:
            severity = _LOWER.get(severity, severity)
            doubts.append(f"range not proven from source ({bug.unproven or 'proof stale'})")
        if bug.only_when is not None:
            severity = _LOWER.get(severity, severity)
            doubts.append(f"only when {bug.only_when}")
        if release is None and bug.introduced is not None:
            severity = Severity.info
            doubts.append(f"{bug.component} release not known from the input")
        unsure = proof is None or (release is None and bug.introduced is not None)
        verb = "may affect" if unsure else "affects"
        where = f"{bug.component} {release}" if release else _range_text(bug)
        fixed = f"; fixed in {bug.component} {bug.fixed}" if bug.fixed else ""
        doubt = f" [{'; '.join(doubts)}]" if doubts else ""
        flag = bug.trigger.flags[0] if bug.trigger.flags else None
        message = (
            f"{bug.id} ({bug.upstream}) {verb} {where}: {bug.title}; it {bug.impact.words}"
            f"{fixed}. Avoid: {bug.avoidance}{doubt}"
        )
        if not (release is None and bug.introduced is not None):  # said in the doubts
            message += _release_basis(ctx, bug, release)
        return self.finding(
            message,
            flag=flag,
            location=ctx.location_of(flag) if flag else None,
            severity=severity,
            record=bug.id,
            bug=bug.upstream,
            report=bug.report,
            fix_url=bug.fix,
            impact=bug.impact.value,
            affected=_range_text(bug),
            proven=proof is not None,
            release=release,
            release_known=release is not None,
            source=bug.report,
        )
