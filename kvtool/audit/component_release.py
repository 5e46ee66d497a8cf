"""Which release of each other KV-cache stack component runs with an engine, and what says so.

vLLM's release has its own resolver (:mod:`kvtool.audit.vllm_release`) and so has
LMCache's (:mod:`kvtool.audit.lmcache_release`); every other component of the known-bug
database (NIXL, Mooncake, Dynamo, llm-d, KServe, AIBrix, ...) is resolved here, the same
way for each. In order:

1. ``--component-version NAME=X`` / the ``component-versions`` setting;
2. a literal pin of the component's PyPI distribution in the engine's own file (a
   ``pip install nixl==X`` in its Dockerfile ``RUN``, script or ``sh -c``), since it
   replaces whatever the image holds; build flavours count as the same distribution
   (``nixl-cu12``, ``mooncake-transfer-engine-cuda13``);
3. the distribution an ``inspect-image`` report found installed in the image
   (``kvtool audit --image-verdicts``);
4. the tag of the engine's image, then of the pod's other containers, where
   ``rules/images/component_tags.toml`` cites that the tag names the component's release
   (``nvcr.io/nvidia/ai-dynamo/vllm-runtime:0.6.1``, or a named part of the tag,
   ``aibrix/vllm-openai:...-nixl-v0.4.1-...``);
5. pins the rest of the input set agrees on (a ``requirements*.txt`` line, a
   ``pip install`` in another file, the chart version of a component's Helm chart that
   ``rules/curated/component_charts.toml`` cites, read from a ``Chart.yaml`` or a
   ``helm install ... CHART --version X`` line); pins that disagree leave the release
   unknown.

Each answer names where it was read, so a finding can say what it rests on.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from functools import cache, lru_cache
from typing import Annotated, Literal

import msgspec

from kvtool.audit.lmcache_release import is_requirements_name
from kvtool.bugdb.model import PACKAGE
from kvtool.errors import KvtoolError
from kvtool.releases.images import parse_image
from kvtool.resources import read_table, rules_dir

TAGS_FILE = "images/component_tags.toml"
CHARTS_FILE = "curated/component_charts.toml"
# Components this module resolves: vLLM and LMCache have their own resolvers.
OWN_RESOLVER = frozenset({"vllm", "lmcache"})
_RELEASE = r"v?(\d{1,9}\.\d{1,9}\.\d{1,9}(?:(?:\.post|rc|\.dev)\d{1,9})?)"
_LEADING_TAG = re.compile(r"^" + _RELEASE + r"(?:-[\w.]+)?$", re.ASCII)
# A CUDA build flavour after a distribution's name (nixl-cu12, ...-cuda13).
_FLAVOUR = r"(?:[-_]cu(?:da)?\d{2,3})?"
_COMMAND = re.compile(r"[^;&|\n]+")
_PIP_INSTALL = re.compile(r"\bpip3?[ \t\r\f\v]+install\b", re.IGNORECASE)


class ComponentRelease(msgspec.Struct, frozen=True):
    """A component's release and where it was read (``pip install nixl==0.7.1 at run.sh:3``)."""

    component: str
    version: str
    origin: str
    file: str | None = None  # the input file a pin was read from


class ComponentTagRow(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """An image whose tag names a component's release: the whole tag's head
    (``leading``) or the ``release`` group of ``pattern`` searched in the tag."""

    repository: str  # "owner/name" as parse_image gives it
    component: str
    tag: Literal["leading", "pattern"]
    pattern: str | None = None
    source: Annotated[str, msgspec.Meta(min_length=3)]

    def __post_init__(self) -> None:
        if self.component not in PACKAGE or self.component in OWN_RESOLVER:
            raise ValueError(f"component {self.component!r}: not one this table resolves")
        if (self.tag == "pattern") != (self.pattern is not None):
            raise ValueError("tag = 'pattern' goes with a pattern, and only it")
        if self.pattern is not None and "(?P<release>" not in self.pattern:
            raise ValueError(f"pattern {self.pattern!r}: name the release group (?P<release>...)")

    def release_in(self, tag: str) -> str | None:
        if self.pattern is None:
            match = _LEADING_TAG.match(tag)
            return match.group(1) if match else None
        found = re.search(self.pattern, tag, re.ASCII)
        return found.group("release").removeprefix("v") if found else None


class ComponentChartRow(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A Helm chart whose version is a component's release."""

    chart: Annotated[str, msgspec.Meta(pattern=r"^[a-z0-9][a-z0-9-]*$")]
    component: str
    source: Annotated[str, msgspec.Meta(min_length=3)]

    def __post_init__(self) -> None:
        if self.component not in PACKAGE or self.component in OWN_RESOLVER:
            raise ValueError(f"component {self.component!r}: not one this table resolves")


def components() -> tuple[str, ...]:
    """The components this module resolves, in the database's order."""
    return tuple(name for name in PACKAGE if name not in OWN_RESOLVER)


@cache
def tag_rows() -> tuple[ComponentTagRow, ...]:
    path = rules_dir() / TAGS_FILE
    try:
        rows = read_table(path).get("rows", [])
        return msgspec.convert(rows, type=tuple[ComponentTagRow, ...])
    except (msgspec.ValidationError, ValueError) as exc:
        raise KvtoolError(f"image table {path}: {exc}") from exc


@cache
def chart_rows() -> tuple[ComponentChartRow, ...]:
    path = rules_dir() / CHARTS_FILE
    try:
        rows = read_table(path).get("rows", [])
        return msgspec.convert(rows, type=tuple[ComponentChartRow, ...])
    except (msgspec.ValidationError, ValueError) as exc:
        raise KvtoolError(f"chart table {path}: {exc}") from exc


# A Chart.yaml line `name: X` (top level, or the first key of a `- name: X` list item),
# and a `version: X` line; group `key` is where the mapping's keys start.
_CHART_NAME = re.compile(
    r"^(?P<key>[ \t]*(?:-[ \t]+)?)name:[ \t]*[\"']?(?P<name>[\w.-]+)[\"']?[ \t]*(?:#.*)?$"
)
_CHART_VERSION = re.compile(
    r"^(?P<key>[ \t]*)version:[ \t]*[\"']?" + _RELEASE + r"[\"']?[ \t]*(?:#.*)?$", re.ASCII
)
_HELM_INSTALL = re.compile(r"\bhelm[ \t]+(?:upgrade|install|template)\b")
_VERSION_OPTION = re.compile(r"--version(?:=|[ \t]+)[\"']?" + _RELEASE + r"(?![\w.])", re.ASCII)


def _chart_component(name: str) -> str | None:
    return next((row.component for row in chart_rows() if row.chart == name), None)


def _chart_yaml_pins(text: str) -> list[tuple[int, str, str, str]]:
    """(offset, component, release, how) of each cited chart in a Chart.yaml: the chart
    itself or a ``dependencies`` item, as ``name`` and ``version`` keys of one mapping.
    One pass over the lines: a mapping ends at a line indented less than its keys, at
    the next list item or at the next ``name`` key."""
    found = []
    current: tuple[str, int, str] | None = None  # (component, key column, chart)
    offset = 0
    for line in text.split("\n"):
        named = _CHART_NAME.match(line)
        if named is not None:
            component = _chart_component(named["name"])
            key = len(named["key"])
            current = (component, key, named["name"]) if component is not None else None
        elif current is not None and line.strip() and not line.lstrip().startswith("#"):
            indent = len(line) - len(line.lstrip(" \t"))
            versioned = _CHART_VERSION.match(line)
            if versioned is not None and len(versioned["key"]) == current[1]:
                found.append((offset, current[0], versioned.group(2), f"chart {current[2]}"))
                current = None
            elif indent < current[1] or line.lstrip().startswith("-"):
                current = None
        offset += len(line) + 1
    return found


def _helm_install_pins(text: str) -> list[tuple[int, str, str, str]]:
    """(offset, component, release, how) of ``helm install ... CHART --version X``,
    within one command (words up to a shell separator), as the shell runs it."""
    found = []
    for command in _COMMAND.finditer(text):
        install = _HELM_INSTALL.search(text, command.start(), command.end())
        if install is None:
            continue
        words = [w.rsplit("/", 1)[-1] for w in text[install.end() : command.end()].split()]
        chart = next((w for w in words if _chart_component(w) is not None), None)
        version = _VERSION_OPTION.search(text, install.end(), command.end())
        if chart is not None and version is not None:
            component = _chart_component(chart)
            assert component is not None
            found.append(
                (install.start(), component, version.group(1), f"helm chart {chart} --version")
            )
    return found


def _chart_pins(text: str, file: str) -> list[tuple[int, str, str, str]]:
    """(offset, component, release, how) of each cited chart's version in one file."""
    if not any(row.chart in text for row in chart_rows()):
        return []
    chart_file = file.replace("\\", "/").rsplit("/", 1)[-1] in ("Chart.yaml", "Chart.yml")
    joined = text.replace("\\\n", "  ")  # same length: offsets still give the line
    return (_chart_yaml_pins(text) if chart_file else []) + _helm_install_pins(joined)


@lru_cache(maxsize=1024)
def from_image(image: str, component: str) -> ComponentRelease | None:
    """The ``component`` release ``image``'s tag names, when a cited row says it does."""
    ref = parse_image(image)
    if ref.tag is None:
        return None
    for row in tag_rows():
        if row.component == component and row.repository == ref.repository:
            version = row.release_in(ref.tag)
            if version is not None:
                return ComponentRelease(component, version, f"image tag {ref.repository}:{ref.tag}")
    return None


@cache
def _pin_patterns() -> tuple[tuple[str, re.Pattern[str], re.Pattern[str]], ...]:
    """Per component with a PyPI distribution: (component, pin after a pip install,
    requirement line)."""
    out = []
    for component in components():
        package = PACKAGE[component]
        if package is None:
            continue
        name = re.escape(package).replace(r"\-", "[-_.]")
        name += _FLAVOUR + r"(?:\[[\w,]*\])?"
        after_install = re.compile(
            r"(?<![\w.-])[\"']?" + name + r"\s*==\s*" + _RELEASE + r"(?![\w.])",
            re.IGNORECASE | re.ASCII,
        )
        requirement = re.compile(
            r"^[ \t]*" + name + r"[ \t]*==[ \t]*" + _RELEASE + r"[ \t]*(?:[;#].*)?$",
            re.IGNORECASE | re.MULTILINE | re.ASCII,
        )
        out.append((component, after_install, requirement))
    return tuple(out)


def pins_in_text(text: str, file: str) -> tuple[ComponentRelease, ...]:
    """Every literal pin of a component's distribution (or cited chart) in one file, with
    its file and line."""
    lowered = text.lower()
    wanted = [row for row in _pin_patterns() if (PACKAGE[row[0]] or "").split("-")[0] in lowered]
    charts = _chart_pins(text, file)
    if not wanted and not charts:
        return ()
    requirements = is_requirements_name(file)
    joined = text.replace("\\\n", "  ")  # same length: offsets still give the line
    found: list[tuple[int, str, str, str]] = []
    for component, after_install, requirement in wanted:
        if requirements:
            found += [
                (m.start(), component, m.group(1), "requirement")
                for m in requirement.finditer(text)
            ]
        else:
            found += [
                (at, component, v, "pip install") for at, v in _pip_pins(joined, after_install)
            ]
    pins = [
        (at, component, version, f"{how} {PACKAGE[component]}=={version}")
        for at, component, version, how in found
    ]
    pins += [(at, component, version, f"{how} {version}") for at, component, version, how in charts]
    out, line, counted = [], 1, 0
    for at, component, version, what in sorted(pins):
        line += text.count("\n", counted, at)  # offsets ascend: each newline counted once
        counted = at
        out.append(ComponentRelease(component, version, f"{what} at {file}:{line}", file))
    return tuple(out)


def _pip_pins(text: str, pin: re.Pattern[str]) -> Iterable[tuple[int, str]]:
    """(offset of the ``pip install``, release) of each pin of one command."""
    for command in _COMMAND.finditer(text):
        position, end = command.start(), command.end()
        while (install := _PIP_INSTALL.search(text, position, end)) is not None:
            found = pin.search(text, install.end(), end)
            if found is None:
                break
            yield install.start(), found.group(1)
            position = found.end()


def from_distributions(installed: Mapping[str, str], component: str) -> ComponentRelease | None:
    """The release of ``component`` among an inspect-image report's installed
    distributions (name -> version), build flavours included."""
    package = PACKAGE.get(component)
    if package is None:
        return None
    name = re.compile(re.escape(package).replace(r"\-", "[-_.]") + _FLAVOUR + "$", re.I)
    for dist, version in sorted(installed.items()):
        if name.match(dist) and re.fullmatch(_RELEASE, version, re.ASCII):
            return ComponentRelease(
                component, version.removeprefix("v"), f"{dist} {version} installed in the image"
            )
    return None


def _agreed(pins: Sequence[ComponentRelease]) -> ComponentRelease | None:
    return pins[-1] if len({pin.version for pin in pins}) == 1 else None


def resolve(
    component: str,
    *,
    explicit: str | None,
    explicit_origin: str,
    file: str | None,
    images: Sequence[str],
    installed: Mapping[str, str],
    pins: Sequence[ComponentRelease],
) -> ComponentRelease | None:
    """The release of ``component`` next to one engine (order: the module docstring).

    ``images``: the engine's image first, then its pod mates'; ``installed``: what an
    inspect-image report found in the engine's image; ``pins``: the input set's pins.
    """
    if explicit is not None:
        return ComponentRelease(component, explicit.removeprefix("v"), explicit_origin)
    mine = [p for p in pins if p.component == component]
    own = [p for p in mine if file is not None and p.file == file]
    if own:
        return _agreed(own)
    bundled = from_distributions(installed, component)
    if bundled is not None:
        return bundled
    for image in images:
        tagged = from_image(image, component)
        if tagged is not None:
            return tagged
    return _agreed(mine) if mine else None
