"""Run the audit: invocations -> normalised configs -> rules -> suppressions -> findings.

Data flows one way. Everything that reads files or tables is behind :class:`Tables`
(the default reads the shipped ``rules/``), so the rest is pure: the same invocations,
settings and tables always give the same report.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

import msgspec

from kvtool.audit import rules as _rules  # noqa: F401  (registers every rule)
from kvtool.audit.component_release import ComponentRelease, components
from kvtool.audit.component_release import resolve as resolve_component_release
from kvtool.audit.context import ModelFacts, RuleContext, Semantics
from kvtool.audit.lmcache_release import LmcacheRelease
from kvtool.audit.lmcache_release import resolve as resolve_lmcache_release
from kvtool.audit.model import (
    Finding,
    InputKind,
    Invocation,
    Location,
    ServeConfig,
    Severity,
    SkippedInput,
    Suppression,
)
from kvtool.audit.registry import ConfigRule, RuleRegistry, registry
from kvtool.audit.settings import AuditSettings
from kvtool.audit.vllm_release import ReleaseClaim, holds_at_every_release
from kvtool.audit.vllm_release import resolve as resolve_vllm_release
from kvtool.errors import KvtoolError
from kvtool.releases.model import ReleaseFacts, ReleaseIndex
from kvtool.releases.target import TargetSource


class Target(msgspec.Struct, frozen=True):
    """The release one invocation was checked against, and why that one.

    ``origin`` says where the release was read ("image tag vllm/vllm-openai:v0.9.2",
    "pip install vllm==0.11.2 at Dockerfile:4"); ``exact`` is False when the table only
    stands in for a release kvtool cannot place, and findings that depend on the
    release are then left out (:func:`kvtool.audit.vllm_release.holds_at_every_release`).
    """

    vllm_version: str
    source: TargetSource
    warning: str | None = None
    origin: str | None = None
    exact: bool = True


class InvocationReport(msgspec.Struct):
    label: str
    file: str | None
    kind: InputKind
    target: Target
    findings: list[Finding] = msgspec.field(default_factory=list)
    notes: list[str] = msgspec.field(default_factory=list)


class AuditReport(msgspec.Struct):
    invocations: list[InvocationReport] = msgspec.field(default_factory=list)
    suppressed: int = 0  # findings silenced by inline or annotation suppressions
    baselined: int = 0  # findings left out because the --baseline file records them
    # Files read but not audited (no server, chart templates, unreadable), set by the CLI.
    skipped: list[SkippedInput] = msgspec.field(default_factory=list)

    @property
    def unreadable(self) -> list[SkippedInput]:
        """Skipped files that could not be read at all: they may hide a server."""
        return [s for s in self.skipped if s.problem]

    @property
    def unrendered(self) -> list[SkippedInput]:
        """Chart templates that were not rendered: not audited as the chart deploys them."""
        return [s for s in self.skipped if s.unrendered]

    @property
    def findings(self) -> list[Finding]:
        return [f for inv in self.invocations for f in inv.findings]

    def counts(self) -> dict[str, int]:
        counts = {s.value: 0 for s in Severity}
        for finding in self.findings:
            counts[finding.severity.value] += 1
        return counts

    def fails(self, fail_on: Severity) -> bool:
        return any(f.severity.rank >= fail_on.rank for f in self.findings)


class Tables(Protocol):
    """Where the engine gets release facts, curated semantics and model facts."""

    def target(
        self, requested: str | None, image: str | None, *, origin: str = "--vllm-version"
    ) -> Target:
        """``origin`` names where ``requested`` was written, for errors about it."""
        ...

    def release(self, version: str) -> ReleaseFacts: ...

    def index(self) -> ReleaseIndex: ...

    def semantics(self) -> Semantics: ...

    def model(self, name: str) -> ModelFacts | None: ...


Normalizer = Callable[[Invocation, ReleaseFacts], ServeConfig]


class Selection(msgspec.Struct):
    """Which rules are on for one file, and the severity each reports at."""

    enabled: set[str]
    severities: dict[str, Severity] = msgspec.field(default_factory=dict)

    def severity(self, finding: Finding) -> Severity:
        return self.severities.get(finding.code, finding.severity)


def resolve_selectors(selectors: Iterable[str], where: str, rules: RuleRegistry) -> set[str]:
    codes: set[str] = set()
    for selector in selectors:
        try:
            codes |= rules.select(selector)
        except KeyError:
            from kvtool.suggest import did_you_mean_rule

            every_code, names = [r.code for r in rules], [r.name for r in rules]
            raise KvtoolError(
                f"{where}: {selector!r} is not a rule code, name or prefix."
                + did_you_mean_rule(selector, every_code, names)
            ) from None
    return codes


def selection_for(
    settings: AuditSettings, file: str | None, rules: RuleRegistry = registry
) -> Selection:
    """Rules enabled for ``file`` under ``settings``; bad selectors raise KvtoolError."""
    where = settings.source or "command line"
    enabled = resolve_selectors(settings.select, f"{where}: select", rules)
    enabled |= resolve_selectors(settings.extend_select, f"{where}: extend-select", rules)
    enabled -= resolve_selectors(settings.ignored_for(file), f"{where}: ignore", rules)
    severities: dict[str, Severity] = {}
    for selector, level in settings.severity.items():
        for code in resolve_selectors([selector], f"{where}: severity", rules):
            severities[code] = level
    return Selection(enabled=enabled, severities=severities)


def check_config(
    ctx: RuleContext, selection: Selection, rules: RuleRegistry = registry
) -> list[Finding]:
    """Every enabled config rule's findings for one context, severities overridden."""
    found: list[Finding] = []
    for rule in rules:
        if not isinstance(rule, ConfigRule) or rule.code not in selection.enabled:
            continue
        for finding in rule.check(ctx):
            found.append(msgspec.structs.replace(finding, severity=selection.severity(finding)))
    return found


def _default_location(invocation: Invocation) -> Location | None:
    """Where a finding without its own location points: the command's first word."""
    for token in invocation.tokens:
        if token.location is not None:
            return token.location
    return Location(file=invocation.file) if invocation.file else None


class _SuppressionUse(msgspec.Struct):
    suppression: Suppression
    codes: set[str]
    invocation_label: str
    used: set[str] = msgspec.field(default_factory=set)


def _applies(use: _SuppressionUse, finding: Finding, file: str | None) -> bool:
    sup = use.suppression
    if finding.code not in use.codes:
        return False
    if sup.scope == "file":
        return finding.location is None or finding.location.file in (None, file)
    if sup.scope == "invocation":
        return finding.invocation == use.invocation_label
    line = (
        sup.target_line
        if sup.target_line is not None
        else (sup.location.line if sup.location else None)
    )
    loc = finding.location
    if loc is None or line is None:
        return False
    last = loc.end_line or loc.line
    return loc.line is not None and last is not None and loc.line <= line <= last


class Auditor:
    """Runs the audit over invocations with one set of settings and tables."""

    def __init__(
        self,
        tables: Tables,
        normalizer: Normalizer,
        settings: AuditSettings,
        *,
        use_suppressions: bool = True,
        rules: RuleRegistry = registry,
        extras: Mapping[str, Any] | None = None,
        version_from_cli: bool = False,
        lmcache_from_cli: bool = False,
        lmcache_pins: Sequence[LmcacheRelease] = (),
        vllm_claims: Sequence[ReleaseClaim] = (),
        component_pins: Sequence[ComponentRelease] = (),
        installed: Mapping[str, str] | None = None,
        component_from_cli: frozenset[str] = frozenset(),
    ) -> None:
        self.extras: Mapping[str, Any] = extras or {}
        # vLLM releases the input set's files state (pip pins, requirements, annotations).
        self.vllm_claims = tuple(vllm_claims)
        self.version_from_cli = version_from_cli
        self.lmcache_from_cli = lmcache_from_cli
        # LMCache pins read from the input set's files (requirements, pip install lines).
        self.lmcache_pins = tuple(lmcache_pins)
        # Other components' pins in the input set, the distributions an inspect-image
        # report found in the image, and the components --component-version named.
        self.component_pins = tuple(component_pins)
        self.installed: Mapping[str, str] = installed or {}
        self.component_from_cli = component_from_cli
        unknown = sorted(set(settings.component_versions) - set(components()))
        if unknown:
            where = f"{settings.source}: " if settings.source else ""
            raise KvtoolError(
                f"{where}component-versions: unknown component {unknown[0]!r}"
                f" (choose from {', '.join(components())})"
            )
        self.tables = tables
        self.normalizer = normalizer
        self.settings = settings
        self.use_suppressions = use_suppressions
        self.rules = rules
        self._suppressions: dict[tuple[object, ...], _SuppressionUse] = {}
        self._meta: list[tuple[Finding, str | None]] = []
        self._selections: dict[str | None, Selection] = {}
        self._reported_for_release: set[tuple[str, str]] = set()  # (code, release)

    def run(self, invocations: Sequence[Invocation]) -> AuditReport:
        """One report; suppression bookkeeping starts afresh, so runs are independent."""
        self._suppressions = {}
        self._meta = []
        self._reported_for_release = set()
        report = AuditReport()
        prepared = [(inv, self.target_for(inv)) for inv in invocations]
        contexts = [self.context_for(inv, target) for inv, target in prepared]
        by_file: dict[str, list[RuleContext]] = {}
        for ctx in contexts:
            if ctx.config.invocation.file is not None:
                by_file.setdefault(ctx.config.invocation.file, []).append(ctx)
        for (invocation, target), ctx in zip(prepared, contexts, strict=True):
            # Rules about engines that work together (a prefill/decode pair) see the other
            # engines of the same input file.
            same_file = by_file.get(invocation.file, []) if invocation.file is not None else []
            siblings = tuple(other for other in same_file if other is not ctx)
            ctx = dataclasses.replace(ctx, siblings=siblings)
            report.invocations.append(self._audit_one(invocation, report, target, ctx))
        self._report_suppressions(report)
        for inv in report.invocations:
            inv.findings.sort(key=_sort_key)
        return report

    def target_for(self, invocation: Invocation) -> Target:
        if self.settings.vllm_version is not None:
            from_file = not self.version_from_cli and self.settings.source is not None
            origin = f"{self.settings.source}: vllm-version" if from_file else "--vllm-version"
            target = self.tables.target(self.settings.vllm_version, None, origin=origin)
            return msgspec.structs.replace(target, source="settings") if from_file else target
        claim = resolve_vllm_release(
            invocation, self.vllm_claims, tabled=self.tables.index().versions
        )
        if claim is not None:
            try:
                target = self.tables.target(claim.version, None, origin=claim.origin)
            except KvtoolError:
                pass  # names no vLLM release kvtool can place: the image decides
            else:
                return msgspec.structs.replace(target, source=claim.source, origin=claim.origin)
        return self.tables.target(None, invocation.image)

    def context_for(self, invocation: Invocation, target: Target) -> RuleContext:
        facts = self.tables.release(target.vllm_version)
        config = self.normalizer(invocation, facts)
        lmcache_release = self.lmcache_release_for(invocation)
        return RuleContext(
            config=config,
            facts=facts,
            index=self.tables.index(),
            semantics=self.tables.semantics(),
            host_ram_gib=self.settings.host_ram_gib,
            lmcache_version=lmcache_release.version if lmcache_release else None,
            lmcache_origin=lmcache_release.origin if lmcache_release else None,
            component_releases=self.component_releases_for(invocation),
            model_lookup=self._model_lookup,
            extras=self.extras,
        )

    def lmcache_release_for(self, invocation: Invocation) -> LmcacheRelease | None:
        """The LMCache release next to this engine: the settings', else what the input shows."""
        explicit = None
        if self.settings.lmcache_version is not None:
            from_file = not self.lmcache_from_cli and self.settings.source is not None
            origin = "--lmcache-version"
            if from_file:
                origin = f"{self.settings.source}: lmcache-version"
            explicit = LmcacheRelease(
                _checked_release(self.settings.lmcache_version, origin), origin
            )
        return resolve_lmcache_release(
            explicit=explicit, file=invocation.file, image=invocation.image, pins=self.lmcache_pins
        )

    def component_releases_for(self, invocation: Invocation) -> dict[str, ComponentRelease]:
        """The release of each other stack component next to this engine, where known."""
        images = [invocation.image] if invocation.image else []
        images += [c.image for c in invocation.pod_containers if c.image]
        found = {}
        for component in components():
            explicit = self.settings.component_versions.get(component)
            origin = "--component-version"
            if component not in self.component_from_cli and self.settings.source is not None:
                origin = f"{self.settings.source}: component-versions"
            if explicit is not None:
                _checked_release(explicit, origin, f"a {component}")
            release = resolve_component_release(
                component,
                explicit=explicit,
                explicit_origin=origin,
                file=invocation.file,
                images=images,
                installed=self.installed,
                pins=self.component_pins,
            )
            if release is not None:
                found[component] = release
        return found

    def _model_lookup(self, name: str) -> ModelFacts | None:
        """The served model's facts: from ``model-config`` when the settings give one."""
        configured = self.settings.model_config
        if configured is None:
            return self.tables.model(name)
        facts = self.tables.model(configured)
        return msgspec.structs.replace(facts, name=name) if facts is not None else None

    def _audit_one(
        self, invocation: Invocation, report: AuditReport, target: Target, ctx: RuleContext
    ) -> InvocationReport:
        selection = self._selection(invocation.file)
        fallback = _default_location(invocation)
        findings = [
            msgspec.structs.replace(f, invocation=invocation.label, location=f.location or fallback)
            for f in check_config(ctx, selection, self.rules)
            if (target.exact or holds_at_every_release(f, ctx.index))
            and self._first_for_release(f, target.vllm_version)
        ]
        if self.use_suppressions:
            findings = self._suppress(invocation, findings, report)
        return InvocationReport(
            label=invocation.label,
            file=invocation.file,
            kind=invocation.kind,
            target=target,
            findings=findings,
            notes=list(invocation.notes),
        )

    def _first_for_release(self, finding: Finding, version: str) -> bool:
        """False for a repeat of a once-per-release rule's finding already reported this run."""
        rule = self.rules.get(finding.code)
        if rule is None or not rule.once_per_release:
            return True
        key = (finding.code, version)
        if key in self._reported_for_release:
            return False
        self._reported_for_release.add(key)
        return True

    def _suppress(
        self, invocation: Invocation, findings: list[Finding], report: AuditReport
    ) -> list[Finding]:
        uses: list[_SuppressionUse] = []
        for sup in invocation.suppressions:
            key = (
                (sup.location.file, sup.location.line, sup.location.column)
                if sup.location
                else (id(sup),)
            )
            key = (*key, sup.codes, sup.scope)
            use = self._suppressions.get(key)
            if use is None:
                use = _SuppressionUse(
                    sup, self._suppression_codes(sup, invocation), invocation.label
                )
                self._suppressions[key] = use
                if not (sup.reason or "").strip():
                    self._meta_finding(
                        "KV001",
                        f"Suppression `{', '.join(sup.codes)}` has no reason; say why it is safe.",
                        sup,
                        invocation.label,
                        invocation,
                    )
            uses.append(use)
        kept: list[Finding] = []
        for finding in findings:
            matching = [use for use in uses if _applies(use, finding, invocation.file)]
            for use in matching:
                use.used.add(finding.code)
            if matching:
                report.suppressed += 1
            else:
                kept.append(finding)
        return kept

    def _suppression_codes(self, sup: Suppression, invocation: Invocation) -> set[str]:
        codes: set[str] = set()
        for written in sup.codes:
            try:
                codes |= self.rules.select(written)
            except KeyError:
                self._meta_finding(
                    "KV002",
                    f"`{written}` in a suppression is not a rule code, name or prefix.",
                    sup,
                    invocation.label,
                    invocation,
                )
        return codes

    def _selection(self, file: str | None) -> Selection:
        """``selection_for`` once per file: one run may audit many invocations of one file."""
        if file not in self._selections:
            self._selections[file] = selection_for(self.settings, file, self.rules)
        return self._selections[file]

    def _meta_finding(
        self,
        code: str,
        message: str,
        sup: Suppression,
        label: str,
        invocation: Invocation | None = None,
    ) -> None:
        """Queue a ``KV`` finding about ``sup`` for invocation ``label``; it points at the
        suppression, else at ``invocation``'s command."""
        rule = self.rules.get(code)
        assert rule is not None  # meta rules are registered with the engine's own module set
        location = sup.location
        if location is None and invocation is not None:
            location = _default_location(invocation)
        finding = rule.finding(message, location=location)
        file = invocation.file if invocation is not None else (location.file if location else None)
        self._meta.append((msgspec.structs.replace(finding, invocation=label), file))

    def _report_suppressions(self, report: AuditReport) -> None:
        for use in self._suppressions.values():
            unused = sorted(use.codes - use.used)
            if use.codes and not use.used:
                written = ", ".join(use.suppression.codes)
                message = f"Suppression `{written}` matched no finding."
            elif unused and len(use.suppression.codes) > 1:
                message = f"Suppression codes {', '.join(unused)} matched no finding."
            else:
                continue
            self._meta_finding("KV000", message, use.suppression, use.invocation_label)
        by_label = {inv.label: inv for inv in report.invocations}
        for finding, file in self._meta:
            selection = self._selection(file)
            if finding.code not in selection.enabled:
                continue
            target = by_label.get(finding.invocation or "")
            if target is not None:
                target.findings.append(
                    msgspec.structs.replace(finding, severity=selection.severity(finding))
                )


def _sort_key(finding: Finding) -> tuple[str, int, int, str]:
    loc = finding.location
    return (
        (loc.file or "") if loc else "",
        (loc.line or 0) if loc else 0,
        (loc.column or 0) if loc else 0,
        finding.code,
    )


def _checked_release(value: str, origin: str, what: str = "an LMCache") -> str:
    """``value`` when it reads as a release (``0.3.9``, ``v0.5.6``); else one line naming
    where it was given, before any rule compares it with a range."""
    from kvtool.versions import Version

    try:
        Version(value.removeprefix("v"))
    except ValueError:  # InvalidVersion, or digits past the int_digits limit
        raise KvtoolError(f"{origin}: {value!r} is not {what} version") from None
    return value
