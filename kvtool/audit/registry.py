"""The rule registry: every audit rule is one class, registered by a decorator.

A rule class carries its identity (``code``, kebab-case ``name``), the kvtool release
that introduced it (``since``), its default severity and any other severity its
findings may take, a one-line ``summary``, how its fixes may be applied and its
references (public URLs, :mod:`kvtool.audit.references`). Its docstring, split into the
sections What / Why / Example / Fix / Releases, plus a References section made from
``references``, is what ``kvtool rule CODE`` prints, what SARIF's rule metadata and
``docs/rules.md`` are built from: one source for every view of a rule.
:meth:`Rule.finding` refuses a severity or fix applicability the metadata does not
declare, so what ``kvtool rule`` says is what the audit reports.

Invariants the registry enforces at import time (a broken rule never ships):
codes match ``<family><3 digits>`` with a known family, names are kebab-case,
neither repeats, every docstring section is present and non-empty, and every rule
cites at least one reference.
"""

from __future__ import annotations

import inspect
import re
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, ClassVar, Literal, TypeVar

import msgspec

from kvtool.audit.model import Finding, Fix, Location, Severity
from kvtool.audit.references import Reference

if TYPE_CHECKING:
    from kvtool.audit.context import RuleContext

FAMILIES: dict[str, str] = {
    "VG": "version gates: flags, choices, env vars, connectors and config keys per release",
    "CN": "connectors, the hybrid KV cache manager (HMA) and offload semantics",
    "SZ": "sizing: units, per-rank versus total, host memory",
    "LZ": "lazy offload (`lmcache.mp.*` keys of LMCacheMPConnector)",
    "SC": "deployment: security floor and known bugs",
    "IM": "image bundling (shared with `kvtool inspect-image`)",
    "KV": "suppressions and other meta findings",
}

# Sections written in the docstring; References is built from the rule's ``references``.
DOC_SECTIONS: tuple[str, ...] = ("What", "Why", "Example", "Fix", "Releases")
REFERENCES_SECTION = "References"

FixApplicability = Literal["safe", "unsafe", "display", "none"]
FIX_APPLICABILITIES: tuple[str, ...] = ("safe", "unsafe", "display", "none")

_VERSION = re.compile(r"^\d+\.\d+\.\d+$")
_CODE = re.compile(r"^(?P<family>[A-Z]{2})\d{3}$")
_NAME = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
# A section heading is the section's name alone on a line, underlined with dashes.
_HEADING = re.compile(r"^(?P<title>[A-Z][a-z]+)\n-{3,}$", re.MULTILINE)


class RuleMeta(msgspec.Struct, frozen=True):
    """Validated metadata of one rule; also the JSON shape of ``kvtool rule --all``.

    Construction raises ``ValueError`` naming the first broken invariant.
    """

    code: str
    name: str
    family: str
    since: str
    default_severity: Severity
    severities: tuple[Severity, ...]
    summary: str
    fix_applicability: FixApplicability
    fix_applicabilities: tuple[FixApplicability, ...]
    references: tuple[Reference, ...]
    sections: dict[str, str]

    def __post_init__(self) -> None:
        match = _CODE.match(self.code)
        if match is None or match["family"] not in FAMILIES:
            raise ValueError(
                f"code {self.code!r} is not <family><3 digits> with a family in {sorted(FAMILIES)}"
            )
        if not _NAME.match(self.name):
            raise ValueError(f"name {self.name!r} is not kebab-case")
        if not _VERSION.match(self.since):
            raise ValueError(f"since {self.since!r} is not the kvtool release X.Y.Z")
        if not isinstance(self.default_severity, Severity):
            raise ValueError(f"default_severity {self.default_severity!r} is not a Severity")
        if self.severities[:1] != (self.default_severity,):
            raise ValueError("severities start with default_severity")
        if not self.summary.strip() or "\n" in self.summary:
            raise ValueError("summary must be one non-empty line")
        if self.fix_applicability not in FIX_APPLICABILITIES:
            raise ValueError(
                f"fix_applicability {self.fix_applicability!r} is not one of {FIX_APPLICABILITIES}"
            )
        if any(a not in FIX_APPLICABILITIES for a in self.fix_applicabilities):
            raise ValueError(f"fix_applicabilities {self.fix_applicabilities!r}")
        if not self.references or not all(isinstance(r, Reference) for r in self.references):
            raise ValueError("a rule cites at least one Reference (kvtool.audit.references)")
        missing = [s for s in DOC_SECTIONS if not self.sections.get(s, "").strip()]
        if missing:
            raise ValueError(f"docstring lacks sections {missing} (each: title, dashes, text)")
        if list(self.sections) != [*DOC_SECTIONS, REFERENCES_SECTION]:
            raise ValueError(
                f"docstring sections {list(self.sections)}: write {list(DOC_SECTIONS)} "
                "in that order (References come from the references attribute)"
            )

    @property
    def severity_text(self) -> str:
        """``warning`` or ``warning or info``: what the rule's findings may be."""
        return " or ".join(s.value for s in self.severities)

    @property
    def fix_text(self) -> str:
        """``safe`` or ``safe or unsafe``: how the rule's fixes may be applied."""
        return " or ".join(self.fix_applicabilities)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form (severities as their names, references as url/note objects)."""
        data: dict[str, Any] = msgspec.to_builtins(self)
        return data


def parse_sections(docstring: str) -> dict[str, str]:
    """Split a rule docstring into ``{section title: text}``; text before the first heading
    is dropped."""
    text = inspect.cleandoc(docstring)
    headings = list(_HEADING.finditer(text))
    sections: dict[str, str] = {}
    for index, heading in enumerate(headings):
        end = headings[index + 1].start() if index + 1 < len(headings) else len(text)
        sections[heading["title"]] = text[heading.end() : end].strip()
    return sections


class Rule:
    """A rule's identity and documentation; its findings come from :meth:`finding`.

    Rules that inspect a serve config subclass :class:`ConfigRule`; meta rules (the
    ``KV`` family) are raised by the engine's suppression stage instead.
    """

    code: ClassVar[str]
    name: ClassVar[str]
    default_severity: ClassVar[Severity]
    summary: ClassVar[str]
    fix_applicability: ClassVar[FixApplicability] = "none"
    # Other severities and fix applicabilities a finding of this rule may carry.
    other_severities: ClassVar[tuple[Severity, ...]] = ()
    other_fix_applicabilities: ClassVar[tuple[FixApplicability, ...]] = ()
    references: ClassVar[tuple[Reference, ...]]
    since: ClassVar[str]
    # A security rule: SARIF tags it and gives it a security-severity for code scanning.
    security: ClassVar[bool] = False
    meta: ClassVar[RuleMeta]
    # True for findings about the target release itself rather than the config (the
    # security floor): the engine reports them once per run and release, not per invocation.
    once_per_release: ClassVar[bool] = False

    def finding(
        self,
        message: str,
        *,
        flag: str | None = None,
        location: Location | None = None,
        fix: Fix | None = None,
        severity: Severity | None = None,
        **evidence: Any,
    ) -> Finding:
        """A finding stamped with this rule's identity (``severity`` overrides the default).

        Raises ``ValueError`` for a severity or fix applicability the rule's metadata
        does not declare (a programming error: the docs would say otherwise).
        """
        chosen = severity or self.default_severity
        if chosen not in self.meta.severities:
            raise ValueError(f"{self.code}: severity {chosen.value} is not declared")
        if fix is not None and fix.applicability not in self.meta.fix_applicabilities:
            raise ValueError(f"{self.code}: fix applicability {fix.applicability} is not declared")
        return Finding(
            code=self.code,
            name=self.name,
            severity=chosen,
            message=message,
            flag=flag,
            location=location,
            fix=fix,
            evidence=evidence,
        )


class ConfigRule(Rule, ABC):
    """A rule that checks one normalised serve config.

    ``check`` must be pure: it reads the context and yields findings, never touching
    files or the network, so the same config always gives the same findings.
    """

    @abstractmethod
    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        """Yield every finding of this rule for ``ctx.config``."""


R = TypeVar("R", bound=type[Rule])


class RegistryError(Exception):
    """A rule's metadata is invalid or collides with another rule (a programming error)."""


class RuleRegistry:
    """All rules by code and by name; selectors accept codes, names, prefixes and ``ALL``."""

    def __init__(self) -> None:
        self._by_code: dict[str, Rule] = {}
        self._by_name: dict[str, Rule] = {}
        self._ordered: list[Rule] = []  # by code, kept sorted as rules register

    def register(self, cls: R) -> R:
        """Class decorator: validate ``cls``'s metadata and add one instance of it."""
        try:
            references = tuple(cls.references)
            sections = parse_sections(cls.__doc__ or "")
            if REFERENCES_SECTION in sections:
                raise ValueError(
                    "the docstring lists references: keep them in the references attribute"
                )
            sections[REFERENCES_SECTION] = "\n".join(f"- {r.text()}" for r in references)
            meta = RuleMeta(
                code=cls.code,
                name=cls.name,
                family=cls.code[:2],
                since=cls.since,
                default_severity=cls.default_severity,
                severities=(cls.default_severity, *cls.other_severities),
                summary=cls.summary,
                fix_applicability=cls.fix_applicability,
                fix_applicabilities=tuple(
                    dict.fromkeys((cls.fix_applicability, *cls.other_fix_applicabilities))
                ),
                references=references,
                sections=sections,
            )
        except (AttributeError, ValueError) as exc:
            raise RegistryError(f"rule class {cls.__name__}: {exc}") from exc
        if meta.code in self._by_code:
            raise RegistryError(f"duplicate rule code {meta.code} ({cls.__name__})")
        if meta.name in self._by_name:
            raise RegistryError(f"duplicate rule name {meta.name} ({cls.__name__})")
        cls.meta = meta
        instance = cls()
        self._by_code[meta.code] = instance
        self._by_name[meta.name] = instance
        self._ordered = sorted(self._by_code.values(), key=lambda rule: rule.code)
        return cls

    def __iter__(self) -> Iterator[Rule]:
        return iter(self._ordered)

    def __len__(self) -> int:
        return len(self._by_code)

    def get(self, code_or_name: str) -> Rule | None:
        """The rule with this code (any case) or name, or None."""
        return self._by_code.get(code_or_name.upper()) or self._by_name.get(code_or_name.lower())

    def select(self, selector: str) -> set[str]:
        """Codes matched by ``selector``: a code, a name, a prefix (``VG``, ``CN01``) or ``ALL``.

        Raises ``KeyError`` naming the selector when nothing matches.
        """
        key = selector.strip()
        if key.upper() == "ALL":
            return set(self._by_code)
        rule = self.get(key)
        if rule is not None:
            return {rule.code}
        prefix = key.upper()
        matched = {code for code in self._by_code if code.startswith(prefix)}
        if not matched:
            raise KeyError(key)
        return matched


registry = RuleRegistry()
register = registry.register
