"""Launch recipes: the shipped YAML files in ``recipes/`` and their pydantic shape.

A recipe is data, not code. It names the processes of one offload setup (a vLLM
engine, an LMCache server, a prefill/decode pair), their arguments with
``${parameter}`` placeholders, and where the field guide's decision tree sends an
operator to it. It does not state which vLLM releases it supports: that is derived
from the generated release tables by :mod:`kvtool.launch.support`, from the flags,
connectors, offload specs and tiers the recipe actually uses.

A recipe with ``variants`` expands into one recipe per variant (``NAME-SUFFIX``),
each merging its ``extra_config`` into every vLLM process's
``kv_connector_extra_config`` (the lazy-offload policies are variants).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kvtool.errors import KvtoolError
from kvtool.resources import recipes_dir
from kvtool.yamlio import safe_load


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ProcessTemplate(_Frozen):
    """One long-running process of the setup, before parameters are filled in.

    ``args`` are the words after ``vllm serve MODEL`` (kind ``vllm``) or after
    ``lmcache server`` (kind ``lmcache-server``); a word that is exactly
    ``${name}`` takes the parameter's value, other words substitute it as text.
    """

    name: str
    kind: Literal["vllm", "lmcache-server"]
    args: tuple[str, ...] = ()
    kv_transfer_config: dict[str, Any] | None = None
    env: dict[str, str] = Field(default_factory=dict)
    # vLLM env vars set only at releases whose tables list them (tuning knobs that
    # appeared later than the recipe's connector).
    env_if_known: dict[str, str] = Field(default_factory=dict)
    # Env vars that Kubernetes fills from the pod IP (a side channel peers dial).
    pod_ip_env: tuple[str, ...] = ()
    port: str  # main HTTP port (a number or a placeholder)
    health_path: str
    ports: dict[str, str] = Field(default_factory=dict)  # other named ports
    # Parameter whose GiB value this process pins in host memory: its container's
    # memory request and limit are sized from it (LMCache operator design).
    pinned_memory: str | None = None
    # Host directories the process writes (a filesystem tier): mounted into containers.
    host_paths: tuple[str, ...] = ()


class CuratedGate(_Frozen):
    """A release floor the generated tables cannot show, with where it was read."""

    since: str  # first vLLM release the recipe's usage works on
    before: str | None = None  # first release it stops working on, when known
    fact: str
    source: str


class Variant(_Frozen):
    suffix: str
    title: str
    when: str
    extra_config: dict[str, Any] = Field(default_factory=dict)


class KaitoTemplate(_Frozen):
    """KAITO's ConfigMap: KAITO starts vLLM and LMCache itself from this value."""

    preset: str  # the KAITO preset name the Workspace example uses


class Needs(_Frozen):
    """Facts the recipe relies on that its arguments do not show by themselves."""

    flags: tuple[str, ...] = ()
    connectors: tuple[str, ...] = ()
    # Connectors the factory must resolve at import time (LMCacheMPConnector from
    # vLLM 0.22: LMCache's own class, which carries the MP protocol and lazy
    # offload); the tables record this as ``supports_hma = None``.
    import_time_connectors: tuple[str, ...] = ()


class Recipe(_Frozen):
    """One offload setup (see the module docstring).

    ``tier_names`` maps a parameter to the spellings a secondary-tier type has had,
    newest first (``fs`` was ``fs_python`` on 0.22.x): the parameter takes the first
    one the target release registers.
    """

    name: str
    title: str
    # The field guide's decision-tree step that leads here; 0 for setups the tree
    # does not cover (kvtool's own reference connector).
    decision: int
    when: str
    description: str
    sizing: Literal["native", "lmcache-mp", "kaito", "none"]
    # The --target values it renders for; None: every target the renderers register
    # (kvtool.launch.targets.RENDERERS), checked when the recipe is loaded.
    targets: tuple[str, ...] | None = None

    @property
    def target_names(self) -> tuple[str, ...]:
        """The --target values this recipe renders for."""
        from kvtool.launch.targets import TARGETS

        return self.targets if self.targets is not None else TARGETS

    needs: Needs = Needs()
    gates: tuple[CuratedGate, ...] = ()
    processes: tuple[ProcessTemplate, ...] = ()
    tier_names: dict[str, tuple[str, ...]] = Field(default_factory=dict)
    kaito: KaitoTemplate | None = None
    notes: tuple[str, ...] = ()
    variants: tuple[Variant, ...] = ()


def _merge_extra_config(process: ProcessTemplate, extra: dict[str, Any]) -> ProcessTemplate:
    if process.kind != "vllm" or process.kv_transfer_config is None or not extra:
        return process
    config = dict(process.kv_transfer_config)
    config["kv_connector_extra_config"] = {
        **config.get("kv_connector_extra_config", {}),
        **extra,
    }
    return process.model_copy(update={"kv_transfer_config": config})


def expand_variants(recipe: Recipe) -> list[Recipe]:
    """One recipe per variant, or the recipe itself when it has none."""
    if not recipe.variants:
        return [recipe]
    return [
        recipe.model_copy(
            update={
                "name": f"{recipe.name}-{variant.suffix}",
                "title": f"{recipe.title}: {variant.title}",
                "when": f"{recipe.when} {variant.when}",
                "processes": tuple(
                    _merge_extra_config(p, variant.extra_config) for p in recipe.processes
                ),
                "variants": (),
            }
        )
        for variant in recipe.variants
    ]


def parse_recipe(path: Path) -> Recipe:
    """Read one recipe file; a malformed file is a KvtoolError naming it."""
    try:
        data = safe_load(path.read_text(encoding="utf-8"))
        return Recipe.model_validate(data)
    except (yaml.YAMLError, ValidationError) as exc:
        first = str(exc).splitlines()[0:3]
        raise KvtoolError(f"{path}: not a valid recipe: {' '.join(first)}") from exc


@cache
def load_recipes(directory: Path | None = None) -> tuple[Recipe, ...]:
    """Every shipped recipe (variants expanded), sorted by decision step then name.

    Invariant: names are unique; a duplicate is a packaging error and raises.
    """
    folder = directory or recipes_dir()
    recipes: dict[str, Recipe] = {}
    from kvtool.launch.targets import TARGETS

    for path in sorted(folder.glob("*.yaml")):
        for recipe in expand_variants(parse_recipe(path)):
            if recipe.name in recipes:
                raise KvtoolError(f"{path}: recipe name {recipe.name!r} is used twice")
            unknown = sorted(set(recipe.targets or ()) - set(TARGETS))
            if unknown:
                raise KvtoolError(
                    f"{path}: recipe {recipe.name!r}: unknown target(s) {', '.join(unknown)} "
                    f"(the renderers are {', '.join(TARGETS)})"
                )
            recipes[recipe.name] = recipe
    return tuple(sorted(recipes.values(), key=lambda r: (r.decision or 99, r.name)))


def find_recipe(name: str) -> Recipe:
    recipes = load_recipes()
    for recipe in recipes:
        if recipe.name == name:
            return recipe
    known = ", ".join(r.name for r in recipes)
    raise KvtoolError(f"unknown recipe {name!r}; known recipes: {known}")
