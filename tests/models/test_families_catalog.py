"""The family table and the sizing catalog agree where a model is in both.

Two independent derivations of one model's traits: the family row (curated by name,
with a cited config.json) and :func:`kvtool.models.classify_config` run on the catalog
entry's config.json fields (the parser ``kvtool size`` uses). A disagreement means one
of the two tables is wrong for that model.
"""

from __future__ import annotations

import pytest

from kvtool.models import classify_config
from kvtool.models.catalog import CatalogEntry, catalog
from kvtool.models.identity import families

# The catalog keeps only the config.json fields that change KV-cache bytes, so expert
# counts are often left out of an entry: "moe" is compared only where the entry has one.
_EXPERT_FIELDS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")


def _has_expert_field(entry: CatalogEntry) -> bool:
    text = entry.config.get("text_config", entry.config)
    return any(key in text for key in _EXPERT_FIELDS)


def _named_entries() -> list[tuple[str, CatalogEntry]]:
    """Every catalog name and alias that some family row matches."""
    return [
        (name, entry)
        for entry in catalog()
        for name in (entry.name, *entry.aliases)
        if any(row.matches(name) for row in families())
    ]


def test_most_catalog_models_have_a_family_row() -> None:
    # The cross-check below is only as strong as its overlap: most catalog entries are
    # widely served models the family table must know by name.
    matched = {entry.name for _, entry in _named_entries()}
    assert len(matched) >= len(catalog()) - 2, sorted(
        e.name for e in catalog() if e.name not in matched
    )


@pytest.mark.parametrize(
    ("name", "entry"), _named_entries(), ids=[name for name, _ in _named_entries()]
)
def test_family_row_traits_equal_the_traits_derived_from_the_catalog_config(
    name: str, entry: CatalogEntry
) -> None:
    row = next(r for r in families() if r.matches(name))
    derived = classify_config(entry.config, name=name, where=f"catalog entry {entry.name}").traits
    curated = frozenset(row.traits)
    if not _has_expert_field(entry):
        curated, derived = curated - {"moe"}, derived - {"moe"}
    assert curated == derived, (name, row.family, sorted(curated), sorted(derived))
