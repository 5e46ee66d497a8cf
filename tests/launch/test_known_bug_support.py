"""A recipe is not offered at a release where a proven known bug breaks its own connector
combination for every model (the audit would report it as an error on what launch wrote).

The records and their proofs are the database's (rules/bugs/), never typed in here.
"""

from __future__ import annotations

from kvtool.bugdb import records
from kvtool.launch.recipe import load_recipes
from kvtool.launch.service import supported_versions
from kvtool.launch.support import breaks_every_model, uses_connectors_of


def test_no_recipe_is_offered_where_a_known_bug_breaks_its_connectors() -> None:
    checked = 0
    for bug in filter(breaks_every_model, records()):
        for recipe in load_recipes():
            if not uses_connectors_of(recipe, bug):
                continue
            affected = [v for v in supported_versions(recipe) if bug.affects(v)]
            assert affected == [], f"{recipe.name} offered at {affected} despite {bug.id}"
            checked += 1
    assert checked, "no recipe uses a connector combination a proven known bug names"
