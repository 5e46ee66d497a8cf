"""One known bug of the KV-cache stack, as data (``rules/bugs/<component>.toml``).

A record names the public report and fix, the component and its affected releases, the
trigger (a predicate over what the audit knows about a serve config, see
:class:`Trigger`), the impact (from which the finding's severity follows), how to avoid
it, and the source marker that proves its release range (``scripts/gen_bug_ranges.py``
checks it against the wheels either side of each end and records what it read in
``rules/bugs/proofs.json``). Every record carries example invocations that the test suite
audits: one that triggers it and one with the avoidance applied.

Record ids are ``KB-<COMPONENT>-<number>``: the component's short name and the number of
the public report (issue or pull request), e.g. ``KB-VLLM-45268`` for
https://github.com/vllm-project/vllm/issues/45268, so an id says where to read more.
"""

from __future__ import annotations

import re
from enum import Enum
from typing import Annotated, Literal

import msgspec

from kvtool.audit.model import Severity
from kvtool.versions import InvalidSpecifier, InvalidVersion, Version, VersionRange

Component = Literal[
    "vllm",
    "lmcache",
    "nixl",
    "mooncake",
    "dynamo",
    "llm-d",
    "kserve",
    "kaito",
    "production-stack",
    "aibrix",
]
# Id prefix per component (KB-<prefix>-<number>).
ID_PREFIX: dict[str, str] = {
    "vllm": "VLLM",
    "lmcache": "LMCACHE",
    "nixl": "NIXL",
    "mooncake": "MOONCAKE",
    "dynamo": "DYNAMO",
    "llm-d": "LLMD",
    "kserve": "KSERVE",
    "kaito": "KAITO",
    "production-stack": "PRODSTACK",
    "aibrix": "AIBRIX",
}
# How messages name each component.
DISPLAY: dict[str, str] = {
    "vllm": "vLLM",
    "lmcache": "LMCache",
    "nixl": "NIXL",
    "mooncake": "Mooncake",
    "dynamo": "Dynamo",
    "llm-d": "llm-d",
    "kserve": "KServe",
    "kaito": "KAITO",
    "production-stack": "production-stack",
    "aibrix": "AIBrix",
}
# The PyPI distribution whose wheels prove a component's ranges (None: not on PyPI).
PACKAGE: dict[str, str | None] = {
    "vllm": "vllm",
    "lmcache": "lmcache",
    "nixl": "nixl",
    "mooncake": "mooncake-transfer-engine",
    "dynamo": "ai-dynamo",
    "llm-d": None,
    "kserve": "kserve",
    "kaito": None,
    "production-stack": None,
    "aibrix": "aibrix",
}
_ID = re.compile(r"^KB-(?P<prefix>[A-Z]+)-(?P<number>[0-9]+)$")
_GITHUB = re.compile(r"^https://github\.com/[\w.-]+/[\w.-]+/(issues|pull)/(?P<number>[0-9]+)$")


class Impact(str, Enum):
    """What the bug does to a deployment; the finding's severity follows from it."""

    silent_corruption = "silent-corruption"  # wrong output, no error
    fails_at_start = "fails-at-start"  # the server does not come up
    crashes_under_load = "crashes-under-load"  # EngineCore dies while serving
    oom = "oom"  # memory exhausted (host or GPU)
    zero_hits = "zero-hits"  # the cache never hits: offload does nothing useful
    slowdown = "slowdown"  # works, but slower or with less cache than configured

    @property
    def severity(self) -> Severity:
        """Errors for what breaks serving or output, warnings for lost performance."""
        if self in (Impact.zero_hits, Impact.slowdown):
            return Severity.warning
        return Severity.error

    @property
    def words(self) -> str:
        return {
            Impact.silent_corruption: "silently corrupts outputs",
            Impact.fails_at_start: "fails at start-up",
            Impact.crashes_under_load: "crashes the engine while serving",
            Impact.oom: "runs out of memory",
            Impact.zero_hits: "never hits the cache",
            Impact.slowdown: "slows serving down",
        }[self]


class _Strict(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    pass


class PodMate(_Strict, frozen=True, kw_only=True):
    """Another container of the engine's pod, as a trigger condition: every field set
    must hold for one container. ``image``: regex searched in its image; ``argv``: regex
    searched in its command and arguments joined by spaces; ``gpus``: whether it is given
    GPUs (a container whose GPUs a DRA claim may give is never matched on ``gpus``)."""

    image: str | None = None
    argv: str | None = None
    gpus: bool | None = None

    def patterns(self) -> list[str]:
        return [p for p in (self.image, self.argv) if p is not None]


class Trigger(_Strict, frozen=True, kw_only=True):
    """The configuration that triggers a bug: every condition that is set must hold.

    ``connectors``: one of them is in use (as vLLM loads it, MultiConnector and its
    children included); ``all_connectors``: every one of them is in use; ``offload``:
    some KV offload connector is in use; ``flags``: all given; ``values``: each option's
    value matches its regex in full, ignoring case (``--flag.key.key`` addresses a key
    inside a JSON-valued flag; ``defaults`` gives the value an unset option has);
    ``extra``: each ``kv_connector_extra_config`` path (``key.key``; a list matches when
    one element does) of a connector in ``connectors`` (any connector when none is
    named) matches its regex; ``extra_above``: each such path holds a number above the
    given one; ``env``: each variable is set and matches its regex in full (ignoring
    case); ``unless_env``: the documented way out, not every one of these matches;
    ``model``: regex searched in the model name (ignoring case); ``model_traits``: the
    model has every trait (``kvtool.models.TRAITS``, plus ``hybrid`` and ``state``);
    ``min_tp``/``min_pp``/``min_dp``: parallel sizes at least these;
    ``expert_parallel``: ``--enable-expert-parallel`` is on; ``image``: regex searched
    in the container image; ``vllm``: the target vLLM release is in this PEP 440
    specifier set (for another component's bug that only some vLLM releases expose);
    ``inputs``: the engine was read from one of these input kinds (``kaito``,
    ``kubernetes``, ``helm-values``, ...); ``pod_mate``: another container of the pod
    matches (:class:`PodMate`); ``no_pod_mate``: no other container matches.
    """

    connectors: tuple[str, ...] = ()
    all_connectors: tuple[str, ...] = ()
    offload: bool = False
    flags: tuple[str, ...] = ()
    values: dict[str, str] = msgspec.field(default_factory=dict)
    defaults: dict[str, str] = msgspec.field(default_factory=dict)
    extra: dict[str, str] = msgspec.field(default_factory=dict)
    extra_above: dict[str, float] = msgspec.field(default_factory=dict)
    env: dict[str, str] = msgspec.field(default_factory=dict)
    unless_env: dict[str, str] = msgspec.field(default_factory=dict)
    model: str | None = None
    model_traits: tuple[str, ...] = ()
    min_tp: int | None = None
    min_pp: int | None = None
    min_dp: int | None = None
    expert_parallel: bool = False
    image: str | None = None
    vllm: str | None = None  # PEP 440 specifier on the vLLM release (another component's bug)
    inputs: tuple[str, ...] = ()
    pod_mate: PodMate | None = None
    no_pod_mate: PodMate | None = None

    def patterns(self) -> list[str]:
        found = [*self.values.values(), *self.extra.values()]
        found += [*self.env.values(), *self.unless_env.values()]
        for mate in (self.pod_mate, self.no_pod_mate):
            found += mate.patterns() if mate is not None else []
        return found + [p for p in (self.model, self.image) if p is not None]

    @property
    def needs_model(self) -> bool:
        return bool(self.model or self.model_traits)


class Marker(_Strict, frozen=True, kw_only=True):
    """Source in the component's wheel that tells affected releases from the others.

    ``means = "affected"``: the marker is the buggy code, present exactly in the affected
    releases; ``means = "fixed"``: the marker is the fix, present from ``fixed`` on.
    ``path`` is a member path in the wheel (``*`` matches across ``/``); ``pattern`` a
    substring, or a regular expression with ``regex = true``.
    """

    path: str
    pattern: Annotated[str, msgspec.Meta(min_length=4)]
    regex: bool = False
    means: Literal["affected", "fixed"]
    # Source that appears with the bug, proving the ``introduced`` end of a fix marker.
    introduced_path: str | None = None
    introduced_pattern: str | None = None
    introduced_regex: bool = False


class ExampleContainer(_Strict, frozen=True, kw_only=True):
    """Another container of the example's pod (a cache server sidecar, a router)."""

    name: str
    image: str
    command: str = ""  # a shell line, split into the container's command
    gpus: int = 0  # nvidia.com/gpu it is given


class Example(_Strict, frozen=True, kw_only=True):
    """An invocation the tests audit: ``command`` as a shell line (``vllm serve ...``).

    With ``image`` or ``pod_mates`` the tests write it as a Kubernetes Deployment whose
    engine container runs ``command`` in ``image`` next to the pod mates.
    """

    fires: bool
    version: str  # the vLLM release the audit targets
    command: str
    env: dict[str, str] = msgspec.field(default_factory=dict)
    lmcache: str | None = None  # the LMCache release, for LMCache records
    # Other components' releases (component -> release), given as --component-version.
    releases: dict[str, str] = msgspec.field(default_factory=dict)
    image: str | None = None
    pod_mates: tuple[ExampleContainer, ...] = ()
    note: str = ""  # what this example shows (the avoidance applied, a neighbour)


class BugRecord(_Strict, frozen=True, kw_only=True):
    id: str
    title: str
    component: Component
    report: str  # public URL of the issue (or PR) that describes the bug
    fix: str | None = None  # public URL of the fixing PR (None: none merged)
    # closed-unfixed: closed upstream with no fix this database could find
    state: Literal["fixed", "open", "closed-unfixed"]
    introduced: str | None = None  # first affected release of ``component``
    fixed: str | None = None  # first release of ``component`` that is not affected
    impact: Impact
    trigger: Trigger
    avoidance: str
    fix_flag: str | None = None  # a flag or setting that turns the fix on, where one exists
    # A condition at run time the config cannot show ("requests are preempted"): the
    # finding then says so and is one step lower, as the config alone may never hit it.
    only_when: str | None = None
    marker: Marker | None = None
    unproven: str | None = None  # why the range cannot be proven from source
    examples: tuple[Example, ...] = ()

    def __post_init__(self) -> None:
        for name in ("introduced", "fixed"):
            value = getattr(self, name)
            if value is not None:
                try:
                    Version(value)
                except InvalidVersion as exc:
                    raise ValueError(f"{name}: not a release version: {value!r}") from exc
        if self.introduced and self.fixed and Version(self.introduced) >= Version(self.fixed):
            raise ValueError(f"introduced {self.introduced} is not before fixed {self.fixed}")
        match = _ID.match(self.id)
        if match is None or match["prefix"] != ID_PREFIX[self.component]:
            raise ValueError(f"id {self.id!r}: write KB-{ID_PREFIX[self.component]}-<number>")
        report = _GITHUB.match(self.report)
        if report is None or report["number"] != match["number"]:
            raise ValueError(f"report {self.report!r}: a GitHub issue or PR numbered as the id")
        if self.fix is not None and not _GITHUB.match(self.fix):
            raise ValueError(f"fix {self.fix!r}: a GitHub pull request or issue URL")
        if (self.state == "fixed") != (self.fixed is not None):
            raise ValueError("state 'fixed' goes with a fixed release, and only it")
        if (self.marker is None) == (self.unproven is None):
            raise ValueError("give a marker that proves the range, or say why none can")
        if self.trigger.vllm is not None:
            try:
                VersionRange(self.trigger.vllm)
            except InvalidSpecifier as exc:
                raise ValueError(f"trigger.vllm: not a version specifier: {exc}") from exc
        for example in self.examples:
            named = set(example.releases)
            if named - set(PACKAGE) or named & {"vllm", "lmcache"}:
                raise ValueError(
                    f"examples: releases {sorted(named)}: name components other than vLLM"
                    " (version) and LMCache (lmcache)"
                )
        if not any(e.fires for e in self.examples) or all(e.fires for e in self.examples):
            raise ValueError("examples: at least one that fires and one that does not")

    @property
    def upstream(self) -> str:
        """``owner/repo#number`` of the report."""
        owner, repo, _, number = self.report.removeprefix("https://github.com/").split("/")
        return f"{owner}/{repo}#{number}"

    @property
    def package(self) -> str | None:
        return PACKAGE[self.component]

    def affects(self, version: str) -> bool:
        v = Version(version)
        if self.introduced is not None and v < Version(self.introduced):
            return False
        return self.fixed is None or v < Version(self.fixed)
