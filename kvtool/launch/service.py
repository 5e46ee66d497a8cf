"""The library face of ``kvtool launch``: list recipes, build plans, render targets.

The CLI (``command.py``) only parses options and prints; tests and other commands
call these functions directly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kvtool.launch.plan import LaunchOptions, LaunchPlan, build_plan
from kvtool.launch.recipe import Recipe, find_recipe, load_recipes
from kvtool.launch.sizes import launch_sizes
from kvtool.launch.support import unmet
from kvtool.launch.targets import render
from kvtool.releases.model import ReleaseFacts


def all_releases() -> tuple[ReleaseFacts, ...]:
    """Every release table kvtool ships, oldest first."""
    from kvtool.releases import available_versions, load_release

    return tuple(load_release(version) for version in available_versions())


def supported_versions(recipe: Recipe) -> tuple[str, ...]:
    """The releases whose tables meet every requirement of ``recipe``, oldest first."""
    return tuple(facts.version for facts in all_releases() if not unmet(recipe, facts))


def version_ranges(versions: Sequence[str], index: Sequence[str]) -> str:
    """``versions`` as runs over ``index``: "0.14.0-0.20.2, 0.22.0-0.33.0"."""
    wanted = set(versions)
    runs: list[list[str]] = []
    previous_in = False
    for version in index:
        inside = version in wanted
        if inside and previous_in:
            runs[-1].append(version)
        elif inside:
            runs.append([version])
        previous_in = inside
    if not runs:
        return "none"
    return ", ".join(run[0] if len(run) == 1 else f"{run[0]}-{run[-1]}" for run in runs)


@dataclass(frozen=True)
class RecipeSummary:
    name: str
    title: str
    decision: int
    when: str
    description: str
    targets: tuple[str, ...]
    supported: str  # release runs, e.g. "0.23.0-0.33.0"
    supported_versions: tuple[str, ...]


def list_recipes() -> list[RecipeSummary]:
    index = all_versions()
    summaries = []
    for recipe in load_recipes():
        versions = supported_versions(recipe)
        summaries.append(
            RecipeSummary(
                name=recipe.name,
                title=recipe.title,
                decision=recipe.decision,
                when=recipe.when,
                description=recipe.description,
                targets=recipe.target_names,
                supported=version_ranges(versions, index),
                supported_versions=versions,
            )
        )
    return summaries


def resolve_release(
    version: str | None, recipe: Recipe | None = None
) -> tuple[ReleaseFacts, str | None]:
    """The table for ``--vllm-version`` and a note about the choice.

    Without a version it is the newest table, or, when ``recipe`` cannot run there but
    runs on an older release (kvtool's own adapter is written for a few series), the
    newest release ``recipe`` supports, so the default plan is one that starts.
    """
    from kvtool.releases import load_release, resolve_target

    target = resolve_target(version, None)
    if version is None and recipe is not None:
        supported = supported_versions(recipe)
        if supported and target.version not in supported:
            chosen = supported[-1]
            note = (
                f"no --vllm-version given; recipe {recipe.name} supports vLLM "
                f"{version_ranges(supported, all_versions())}, not the newest release table "
                f"({target.version}): planning for {chosen}"
            )
            return load_release(chosen), note
    return load_release(target.version), target.warning


def all_versions() -> tuple[str, ...]:
    """Every tabled release, oldest first."""
    from kvtool.releases import available_versions

    return tuple(available_versions())


@dataclass(frozen=True)
class LaunchResult:
    plan: LaunchPlan
    target: str
    files: dict[str, str]
    release_note: str | None


def launch(
    recipe_name: str,
    options: LaunchOptions,
    *,
    vllm_version: str | None,
    host_ram_gib: float | None = None,
    cpu_tier_gib: float | None = None,
    utilization: float | None = None,
    sizing_model: str | None = None,
) -> LaunchResult:
    """Build and render ``recipe_name``; every bad input is a KvtoolError."""
    recipe = find_recipe(recipe_name)
    facts, note = resolve_release(vllm_version, recipe)
    sizes = launch_sizes(
        recipe,
        model=sizing_model or options.model,
        release=facts.version,
        tp=options.tp,
        host_ram_gib=host_ram_gib,
        cpu_tier_gib=cpu_tier_gib,
        utilization=utilization,
    )
    plan = build_plan(recipe, options, facts, sizes)
    return LaunchResult(
        plan=plan, target=options.target, files=render(plan, options.target), release_note=note
    )
