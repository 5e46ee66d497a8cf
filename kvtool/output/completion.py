"""Shell-completion callbacks for values kvtool knows: rule codes, recipe names, catalog
models, release versions and ``--target`` values.

Each reads the registry that owns the values (imported only when the shell asks), so a
new rule, recipe, model or release table completes without touching this module.
"""

from __future__ import annotations


def _matching(values: list[str], incomplete: str) -> list[str]:
    return [value for value in values if value.lower().startswith(incomplete.lower())]


def complete_rule(incomplete: str) -> list[str]:
    import kvtool.audit.rules  # noqa: F401  (registers every rule)
    from kvtool.audit.registry import registry

    return _matching([value for rule in registry for value in (rule.code, rule.name)], incomplete)


def complete_recipe(incomplete: str) -> list[str]:
    from kvtool.launch.recipe import load_recipes

    return _matching([recipe.name for recipe in load_recipes()], incomplete)


def complete_model(incomplete: str) -> list[str]:
    from kvtool.models.catalog import catalog

    return _matching([entry.name for entry in catalog()], incomplete)


def complete_version(incomplete: str) -> list[str]:
    from kvtool.releases.loader import available_versions

    return _matching(list(reversed(available_versions())), incomplete)


def complete_target(incomplete: str) -> list[str]:
    from kvtool.launch.targets import RENDERERS

    return _matching(list(RENDERERS), incomplete)
