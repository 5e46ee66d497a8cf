"""Which vLLM releases a recipe supports, derived from the generated release tables.

A recipe never states a release range. Its requirements are read off what it uses:
every ``--flag`` in its vLLM arguments (and any literal value checked against the
flag's enforced choices), every connector named in its kv-transfer-config (MultiConnector
children included), the offload spec and secondary-tier types inside it, its top-level
kv-transfer-config keys, the connectors it needs resolved at import time, and the
curated gates it cites. A release supports the recipe when its table meets them all.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from kvtool.launch.recipe import Recipe
from kvtool.versions import Version

if TYPE_CHECKING:
    from kvtool.bugdb import BugRecord
from kvtool.launch.template import PLACEHOLDER as _PLACEHOLDER
from kvtool.releases.model import ReleaseFacts

RequirementKind = Literal[
    "flag",
    "flag-value",
    "connector",
    "import-time-connector",
    "offload-spec",
    "tier",
    "tier-any",
    "kv-transfer-field",
    "gate",
]


@dataclass(frozen=True)
class Requirement:
    """One fact a release must have for the recipe to work there."""

    kind: RequirementKind
    name: str
    value: str | None = None  # flag-value: the literal value; gate: the first release
    names: tuple[str, ...] = ()  # tier-any: the spellings, any one of which will do
    before: str | None = None  # gate: the first release it no longer holds for
    why: str | None = None  # gate: the curated fact and its source


def _kv_configs(config: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """A kv-transfer-config and, for MultiConnector, each child config."""
    yield config
    extra = config.get("kv_connector_extra_config") or {}
    for child in extra.get("connectors") or ():
        if isinstance(child, dict):
            yield from _kv_configs(child)


def _flag_requirements(args: tuple[str, ...]) -> Iterator[Requirement]:
    for index, word in enumerate(args):
        if not word.startswith("--"):
            continue
        yield Requirement("flag", word)
        following = args[index + 1] if index + 1 < len(args) else None
        if following is not None and not following.startswith("--") and "${" not in following:
            yield Requirement("flag-value", word, value=following)


def requirements(recipe: Recipe) -> tuple[Requirement, ...]:
    """Everything ``recipe`` relies on, without duplicates, in a stable order."""
    found: list[Requirement] = []
    for process in recipe.processes:
        if process.kind != "vllm":
            continue
        found.extend(_flag_requirements(process.args))
        if process.kv_transfer_config is None:
            continue
        found.append(Requirement("flag", "--kv-transfer-config"))
        for config in _kv_configs(process.kv_transfer_config):
            found.extend(Requirement("kv-transfer-field", key) for key in config)
            connector = config.get("kv_connector")
            if isinstance(connector, str) and "kv_connector_module_path" not in config:
                found.append(Requirement("connector", connector))
            extra = config.get("kv_connector_extra_config") or {}
            if isinstance(extra.get("spec_name"), str):
                found.append(Requirement("offload-spec", extra["spec_name"]))
            for tier in extra.get("secondary_tiers") or ():
                if isinstance(tier, dict) and isinstance(tier.get("type"), str):
                    found.append(_tier_requirement(recipe, tier["type"]))
    found.extend(Requirement("flag", flag) for flag in recipe.needs.flags)
    found.extend(Requirement("connector", name) for name in recipe.needs.connectors)
    found.extend(
        Requirement("import-time-connector", name) for name in recipe.needs.import_time_connectors
    )
    found.extend(
        Requirement("gate", gate.fact, value=gate.since, before=gate.before, why=gate.source)
        for gate in recipe.gates
    )
    return tuple(dict.fromkeys(found))


def _tier_requirement(recipe: Recipe, written: str) -> Requirement:
    match = _PLACEHOLDER.fullmatch(written)
    if match and match.group(1) in recipe.tier_names:
        return Requirement("tier-any", match.group(1), names=recipe.tier_names[match.group(1)])
    return Requirement("tier", written)


def tier_parameters(recipe: Recipe, facts: ReleaseFacts) -> dict[str, str]:
    """Each ``tier_names`` parameter -> the first spelling ``facts`` registers (if any)."""
    chosen: dict[str, str] = {}
    for parameter, spellings in recipe.tier_names.items():
        for spelling in spellings:
            if spelling in facts.offload_tiers:
                chosen[parameter] = spelling
                break
    return chosen


def _flag_names(facts: ReleaseFacts) -> dict[str, tuple[str, ...] | None]:
    """Every accepted spelling -> the flag's enforced choices (None: not enforced)."""
    names: dict[str, tuple[str, ...] | None] = {}
    for flag in facts.flags:
        for spelling in (flag.name, *flag.aliases):
            names[spelling] = flag.choices
        if flag.negative:
            names[flag.negative] = None
    return names


def below_security_floor(version: str) -> list[str]:
    """The published vLLM vulnerabilities (curated, cited rows) ``version`` is affected by."""
    from kvtool.releases import security_floor

    return [
        f"vLLM {version} is below the security floor: {row.id} (fixed in {row.fixed})"
        for row in security_floor()
        if row.contains(version)
    ]


def recipe_connectors(recipe: Recipe) -> set[str]:
    """Every connector the recipe's engines load (MultiConnector children included)."""
    names: set[str] = set()
    for process in recipe.processes:
        if process.kind == "vllm" and process.kv_transfer_config is not None:
            for config in _kv_configs(process.kv_transfer_config):
                if isinstance(config.get("kv_connector"), str):
                    names.add(config["kv_connector"])
    return names


def breaks_every_model(bug: BugRecord) -> bool:
    """A vLLM bug, proven from the wheels, that breaks serving or outputs whenever its
    connectors are in use: its trigger names connectors and nothing else, and it needs
    no run-time condition."""
    from kvtool.bugdb import proof_of

    trigger = bug.trigger
    connectors_only = trigger == type(trigger)(
        connectors=trigger.connectors, all_connectors=trigger.all_connectors
    )
    return (
        bug.component == "vllm"
        and bug.impact.severity.value == "error"
        and connectors_only
        and bool(trigger.connectors or trigger.all_connectors)
        and bug.only_when is None
        and proof_of(bug) is not None
    )


def uses_connectors_of(recipe: Recipe, bug: BugRecord) -> bool:
    """The recipe's engines load the connectors ``bug``'s trigger names."""
    used = recipe_connectors(recipe)
    trigger = bug.trigger
    if trigger.connectors and not used & set(trigger.connectors):
        return False
    return set(trigger.all_connectors) <= used


def known_bugs_of(recipe: Recipe, version: str) -> list[str]:
    """Known bugs (``rules/bugs/``) that break this recipe at ``version`` whatever model it
    serves (:func:`breaks_every_model`). kvtool's own audit reports each as an error, so
    such a release does not support the recipe."""
    from kvtool.bugdb import records

    return [
        f"known bug {bug.id} ({bug.upstream}) {bug.impact.words} here"
        for bug in records()
        if bug.affects(version) and breaks_every_model(bug) and uses_connectors_of(recipe, bug)
    ]


def unmet(recipe: Recipe, facts: ReleaseFacts, *, secure_only: bool = True) -> list[str]:
    """Why ``recipe`` cannot run on ``facts.version``; empty when it can.

    With ``secure_only`` a release affected by a published vulnerability counts as
    unsupported too: kvtool's own audit reports it as an error. So does a release where a
    proven known bug breaks the recipe's own connector combination, whatever the model.
    """
    flags = _flag_names(facts)
    connectors = {c.name: c for c in facts.connectors}
    fields = {f.name for f in facts.kv_transfer_config_fields}
    reasons: list[str] = []
    for need in requirements(recipe):
        if need.kind == "flag" and need.name not in flags:
            reasons.append(f"flag {need.name} does not exist")
        elif need.kind == "flag-value":
            choices = flags.get(need.name)
            if choices is not None and need.value not in choices:
                reasons.append(f"{need.name} does not accept {need.value!r}")
        elif need.kind == "connector" and need.name not in connectors:
            reasons.append(f"connector {need.name} is not registered")
        elif need.kind == "import-time-connector":
            fact = connectors.get(need.name)
            if fact is None or fact.supports_hma is not None:
                reasons.append(
                    f"connector {need.name} is not resolved to LMCache's own class at import time"
                )
        elif need.kind == "offload-spec" and need.name not in facts.offload_specs:
            reasons.append(f"offload spec {need.name} is not registered")
        elif need.kind == "tier" and need.name not in facts.offload_tiers:
            reasons.append(f"secondary tier type {need.name!r} is not registered")
        elif need.kind == "tier-any" and not set(need.names) & set(facts.offload_tiers):
            reasons.append(f"no secondary tier type {' or '.join(need.names)} is registered")
        elif need.kind == "kv-transfer-field" and fields and need.name not in fields:
            reasons.append(f"KVTransferConfig has no field {need.name!r}")
        elif need.kind == "gate" and not _in_gate(facts.version, need):
            upper = f" and < {need.before}" if need.before else ""
            reasons.append(f"needs vLLM >= {need.value}{upper}: {need.name}")
    reasons.extend(known_bugs_of(recipe, facts.version))
    if secure_only:
        reasons.extend(below_security_floor(facts.version))
    return reasons


def _in_gate(version: str, gate: Requirement) -> bool:
    release = Version(version)
    if release < Version(gate.value or "0"):
        return False
    return gate.before is None or release < Version(gate.before)


def hma_disable_needed(recipe: Recipe, facts: ReleaseFacts) -> bool:
    """True when a registered connector the recipe uses lacks SupportsHMA at this release.

    vLLM then either disables HMA itself or (native offload on 0.11.1-0.20.x GPUs)
    refuses to start unless ``--disable-hybrid-kv-cache-manager`` is given, so the
    flag is emitted; for HMA-capable and import-time-resolved connectors it is not.
    """
    connectors = {c.name: c for c in facts.connectors}
    used = {r.name for r in requirements(recipe) if r.kind == "connector"}
    return any(name in connectors and connectors[name].supports_hma is False for name in used)
