"""A recipe is not offered at a release where a proven known bug breaks its own connector
combination for every model (the audit would report it as an error on what launch wrote).

The records and their proofs are the database's (rules/bugs/), never typed in here.
"""

from __future__ import annotations

from kvtool.bugdb import proof_of, records
from kvtool.launch.recipe import load_recipes
from kvtool.launch.service import supported_versions
from kvtool.launch.support import recipe_connectors


def _connector_only_error_bugs() -> list:  # type: ignore[type-arg]
    found = []
    for bug in records():
        t = bug.trigger
        bare = t == type(t)(connectors=t.connectors, all_connectors=t.all_connectors)
        if (
            bug.component == "vllm"
            and bug.impact.severity.value == "error"
            and bare
            and (t.connectors or t.all_connectors)
            and bug.only_when is None
            and proof_of(bug) is not None
        ):
            found.append(bug)
    return found


def test_no_recipe_is_offered_where_a_known_bug_breaks_its_connectors() -> None:
    checked = 0
    for bug in _connector_only_error_bugs():
        for recipe in load_recipes():
            used = recipe_connectors(recipe)
            t = bug.trigger
            if t.connectors and not used & set(t.connectors):
                continue
            if not set(t.all_connectors) <= used:
                continue
            affected = [v for v in supported_versions(recipe) if bug.affects(v)]
            assert affected == [], f"{recipe.name} offered at {affected} despite {bug.id}"
            checked += 1
    assert checked, "no recipe uses a connector combination a proven known bug names"
