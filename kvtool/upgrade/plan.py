"""What changes for one serve invocation between its current release and a target release.

The audit engine does the checking: the invocation is audited at its current release and
at every tabled release up to the target, and each step reports the findings that enter
or leave (a flag removed, an env var renamed, a connector gone, a known bug, ...). Beside
them each step lists what the tables say changed that no rule turns into a finding: CLI
defaults of flags the invocation leaves unset, curated behaviour facts (HMA decision,
model runner, prefix-cache retention), connectors appearing, disappearing or changing
SupportsHMA, and security advisories entered or left. Nothing here knows a version
fact of its own.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Literal

import msgspec

from kvtool.audit.context import RuleContext
from kvtool.audit.engine import Auditor, Target
from kvtool.audit.model import Finding, InputKind, Invocation, Location, Severity
from kvtool.audit.normalize import normalize
from kvtool.audit.settings import AuditSettings
from kvtool.audit.tables import ShippedTables
from kvtool.errors import KvtoolError
from kvtool.releases import available_versions, version_from_image
from kvtool.upgrade.migrate import env_flag_fix
from kvtool.versions import Version

ChangeKind = Literal[
    "finding-entered", "finding-left", "default", "behaviour", "connector", "security"
]
# The security floor is reported from the advisory table itself (one change per
# advisory), so the audit's one-finding-for-all-advisories rule is left out of the diff;
# suppression bookkeeping (KV) is about the file, not the release.
_NOT_DIFFED = ("SC001", "KV")


class StepChange(msgspec.Struct, frozen=True, kw_only=True):
    kind: ChangeKind
    severity: Severity
    message: str
    code: str | None = None  # the rule code of a finding change
    subject: str | None = None  # flag, env var, connector or advisory id
    location: Location | None = None
    fix: str | None = None  # the safe fix's description, when the finding has one
    # False for a release-wide change that touches nothing this invocation sets or uses
    # (text output counts those instead of listing them).
    touches: bool = True


class Step(msgspec.Struct, frozen=True, kw_only=True):
    """Changes on arriving at ``version`` from the release before it."""

    version: str
    changes: tuple[StepChange, ...]


class InvocationUpgrade(msgspec.Struct, kw_only=True):
    label: str
    file: str | None
    kind: InputKind
    current: Target
    target: Target
    image: str | None
    new_image: str | None  # the image reference with its tag moved to the target release
    steps: tuple[Step, ...]
    # Findings at the target that the invocation does not have at its current release.
    entered: tuple[Finding, ...]
    # Every finding the invocation has at the target, whichever release it entered at: an
    # error already there at the current release is still an error after the upgrade.
    at_target: tuple[Finding, ...] = ()
    # Errors the invocation already has at its current release.
    broken_now: tuple[Finding, ...] = ()

    @property
    def target_errors(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.at_target if f.severity is Severity.error)

    @property
    def breaks(self) -> bool:
        """The invocation as written does not start at the target release, whether the
        upgrade broke it or it was broken before."""
        return bool(self.target_errors)


class UpgradeReport(msgspec.Struct, kw_only=True):
    to_version: str
    invocations: list[InvocationUpgrade]

    @property
    def breaks(self) -> bool:
        return any(inv.breaks for inv in self.invocations)


def _finding_key(finding: Finding) -> tuple[object, ...]:
    loc = finding.location
    identity = finding.evidence.get("bug") or finding.evidence.get("connector")
    return (
        finding.code,
        finding.flag,
        loc.line if loc else None,
        loc.column if loc else None,
        identity,
    )


def _diffed(findings: Sequence[Finding]) -> dict[tuple[object, ...], Finding]:
    return {_finding_key(f): f for f in findings if not f.code.startswith(_NOT_DIFFED)}


def _finding_changes(
    before: dict[tuple[object, ...], Finding], after: dict[tuple[object, ...], Finding]
) -> list[StepChange]:
    out = []
    for key, finding in after.items():
        if key not in before:
            fix = finding.fix
            out.append(
                StepChange(
                    kind="finding-entered",
                    severity=finding.severity,
                    message=finding.message,
                    code=finding.code,
                    subject=finding.flag,
                    location=finding.location,
                    fix=fix.description if fix and fix.applicability == "safe" else None,
                )
            )
    for key, finding in before.items():
        if key not in after:
            out.append(
                StepChange(
                    kind="finding-left",
                    severity=Severity.info,
                    message=f"no longer reported: {finding.message}",
                    code=finding.code,
                    subject=finding.flag,
                    location=finding.location,
                )
            )
    return out


def _default_changes(old: RuleContext, new: RuleContext) -> list[StepChange]:
    """CLI defaults that changed for flags the invocation leaves to their default."""
    given = {o.flag for o in new.config.options} | {o.flag for o in old.config.options}
    out = []
    for fact in new.facts.flags:
        before = old.flag_fact(fact.name)
        if fact.name in given or before is None or before.default == fact.default:
            continue
        out.append(
            StepChange(
                kind="default",
                severity=Severity.info,
                message=(
                    f"`{fact.name}` (not set here) defaults to {_show(fact.default)} "
                    f"instead of {_show(before.default)}"
                ),
                subject=fact.name,
            )
        )
    return out


def _show(value: Any) -> str:
    return "unset (None)" if value is None else f"`{msgspec.json.encode(value).decode()}`"


# Behaviour facts that concern every serve invocation (the HMA decision and its flag's
# tri-state, the model runner default, prefix caching and its retention); any other fact
# touches an invocation only when its statement names a flag, env var or connector the
# invocation uses.
_EVERY_INVOCATION = (
    "hma.decision",
    "hma.disable_flag_default",
    "mrv2.",
    "prefix_caching.",
    "retention.",
)


def _touches(key: str, statement: str, ctx: RuleContext) -> bool:
    if key.startswith(_EVERY_INVOCATION):
        return True
    used = {o.flag for o in ctx.config.options} | set(ctx.config.env) | set(ctx.connector_names)
    return any(re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", statement) for name in used)


def _behaviour_changes(old: RuleContext, new: RuleContext) -> list[StepChange]:
    """Curated behaviour facts whose row at the new release differs from the old one."""
    out = []
    keys = dict.fromkeys(f.key for f in new.semantics.facts)
    for key in keys:
        before = new.semantics.fact(key, old.version)
        after = new.semantics.fact(key, new.version)
        if before == after:
            continue
        if after is not None:
            message = after.statement
        elif before is not None:
            message = f"no longer holds: {before.statement}"
        else:  # pragma: no cover - two missing rows compare equal
            continue
        statement = " ".join(r.statement for r in (before, after) if r is not None)
        out.append(
            StepChange(
                kind="behaviour",
                severity=Severity.info,
                message=message,
                subject=key,
                touches=_touches(key, statement, new) or _touches(key, statement, old),
            )
        )
    return out


def _hma_word(value: bool | None) -> str:
    return "decided at import time" if value is None else ("yes" if value else "no")


def _connector_changes(old: RuleContext, new: RuleContext) -> list[StepChange]:
    used = set(old.connector_names) | set(new.connector_names)
    before = {c.name: c for c in old.facts.connectors}
    after = {c.name: c for c in new.facts.connectors}
    out = []
    for name in sorted(set(before) | set(after)):
        severity = Severity.warning if name in used else Severity.info
        here = " (this invocation uses it)" if name in used else ""
        if name not in before:
            message = f"connector `{name}` is registered{here}"
        elif name not in after:
            message = f"connector `{name}` is no longer registered{here}"
        elif before[name].supports_hma != after[name].supports_hma:
            message = (
                f"connector `{name}` SupportsHMA: {_hma_word(before[name].supports_hma)} -> "
                f"{_hma_word(after[name].supports_hma)}{here}"
            )
        else:
            continue
        out.append(
            StepChange(
                kind="connector",
                severity=severity,
                message=message,
                subject=name,
                touches=name in used,
            )
        )
    return out


def _security_changes(old: RuleContext, new: RuleContext) -> list[StepChange]:
    before = {a.id: a for a in new.semantics.advisories_at(old.version)}
    after = {a.id: a for a in new.semantics.advisories_at(new.version)}
    out = []
    for advisory_id in sorted(set(before) | set(after)):
        if advisory_id in before and advisory_id not in after:
            row = before[advisory_id]
            message = f"{advisory_id} fixed: {row.summary}"
            severity = Severity.info
        elif advisory_id in after and advisory_id not in before:
            row = after[advisory_id]
            message = f"{advisory_id} affects this release: {row.summary}"
            severity = Severity.warning
        else:
            continue
        out.append(
            StepChange(kind="security", severity=severity, message=message, subject=advisory_id)
        )
    return out


def retag(image: str, version: str) -> str | None:
    """``image`` with the vLLM version in its tag replaced by ``version`` (other tag parts
    such as ``-cuda12`` kept); None when the tag names no version."""
    current = version_from_image(image)
    if current is None:
        return None
    ref, _, digest = image.partition("@")
    colon = ref.rfind(":")
    tag = ref[colon + 1 :]
    prefix = "v" if tag.startswith("v") else ""
    new_tag = re.sub(rf"^v?{re.escape(current)}", prefix + version, tag, count=1)
    return ref[:colon] + ":" + new_tag + (f"@{digest}" if digest else "")


def _with_env_fix(finding: Finding, invocation: Invocation, version: str) -> Finding:
    """``finding`` with the env-var-to-flag fix when it is one and has none."""
    fix = None if finding.fix is not None else env_flag_fix(finding, invocation, version)
    return finding if fix is None else msgspec.structs.replace(finding, fix=fix)


def _with_fix_texts(steps: list[Step], entered: Sequence[Finding]) -> list[Step]:
    """Steps whose entered findings name the fixes the target's findings carry."""
    fixes: dict[tuple[str | None, str | None], str] = {
        (f.code, f.flag): f.fix.description
        for f in entered
        if f.fix is not None and f.fix.applicability == "safe"
    }
    return [
        Step(
            version=step.version,
            changes=tuple(
                msgspec.structs.replace(c, fix=fixes[(c.code, c.subject)])
                if c.kind == "finding-entered" and c.fix is None and (c.code, c.subject) in fixes
                else c
                for c in step.changes
            ),
        )
        for step in steps
    ]


class Planner:
    """Plans upgrades of invocations to one target release with one set of audit settings."""

    def __init__(self, settings: AuditSettings, to_version: str, from_version: str | None):
        self.tables = ShippedTables()
        self.settings = settings
        self.target = self.tables.target(to_version, None, origin="--to")
        self.from_version = from_version

    def current(self, invocation: Invocation) -> Target:
        """The release the invocation runs now: ``--from``, else the image tag, else the
        settings' ``vllm-version``."""
        if self.from_version is not None:
            return self.tables.target(self.from_version, None, origin="--from")
        if invocation.image and version_from_image(invocation.image):
            return self.tables.target(None, invocation.image)
        if self.settings.vllm_version is not None:
            origin = f"{self.settings.source or 'settings'}: vllm-version"
            found = self.tables.target(self.settings.vllm_version, None, origin=origin)
            return msgspec.structs.replace(found, source="settings")
        raise KvtoolError(
            f"upgrade: {invocation.label}: cannot tell which vLLM release it runs now "
            "(no --from, no version in an image tag, no vllm-version setting)"
        )

    def _auditor(self, version: str) -> Auditor:
        settings = msgspec.structs.replace(self.settings, vllm_version=version)
        return Auditor(self.tables, normalize, settings, version_from_cli=True)

    def _audit(self, invocation: Invocation, version: str) -> tuple[RuleContext, list[Finding]]:
        auditor = self._auditor(version)
        target = Target(vllm_version=version, source="flag")
        report = auditor.run([invocation])
        return auditor.context_for(invocation, target), report.invocations[0].findings

    def plan(self, invocation: Invocation) -> InvocationUpgrade:
        current = self.current(invocation)
        start, end = Version(current.vllm_version), Version(self.target.vllm_version)
        if end <= start:
            raise KvtoolError(
                f"upgrade: {invocation.label} already runs vLLM {current.vllm_version}; "
                f"--to {self.target.vllm_version} is not newer"
            )
        on_the_way = [v for v in available_versions() if start < Version(v) <= end]
        old_ctx, old_findings = self._audit(invocation, current.vllm_version)
        first = _diffed(old_findings)
        previous = first
        steps = []
        findings: list[Finding] = old_findings
        for version in on_the_way:
            ctx, findings = self._audit(invocation, version)
            diffed = _diffed(findings)
            changes = [
                *_finding_changes(previous, diffed),
                *_security_changes(old_ctx, ctx),
                *_connector_changes(old_ctx, ctx),
                *_behaviour_changes(old_ctx, ctx),
                *_default_changes(old_ctx, ctx),
            ]
            if changes:
                steps.append(Step(version=version, changes=tuple(changes)))
            old_ctx, previous = ctx, diffed
        # The security floor is diffed from the advisory table, but an advisory that still
        # affects the target is part of the invocation's state there.
        at_target = tuple(
            _with_env_fix(f, invocation, self.target.vllm_version)
            for f in findings
            if not f.code.startswith("KV")
        )
        entered = tuple(
            f
            for f in at_target
            if _finding_key(f) not in first and not f.code.startswith(_NOT_DIFFED)
        )
        steps = _with_fix_texts(steps, at_target)
        return InvocationUpgrade(
            label=invocation.label,
            file=invocation.file,
            kind=invocation.kind,
            current=current,
            target=self.target,
            image=invocation.image,
            new_image=retag(invocation.image, self.target.vllm_version)
            if invocation.image
            else None,
            steps=tuple(steps),
            entered=entered,
            at_target=at_target,
            broken_now=tuple(f for f in first.values() if f.severity is Severity.error),
        )

    def run(self, invocations: Sequence[Invocation]) -> UpgradeReport:
        return UpgradeReport(
            to_version=self.target.vllm_version,
            invocations=[self.plan(inv) for inv in invocations],
        )
