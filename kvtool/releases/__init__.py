"""Per-release facts about vLLM, read from the generated tables in ``rules/releases/``.

Public API (see the modules for details):

* ``available_versions()``, ``load_release(version)``, ``release_index()`` and the
  ``*_gate(name)`` helpers (``loader``);
* ``resolve_target(requested, image) -> TargetRelease`` (``target``);
* curated tables with typed (msgspec) rows: ``security_floor()``,
  ``bundling_pins()``, ``backend_connector_map()`` / ``backend_connector()``,
  ``semantic_facts()`` / ``semantic()``, ``replacements()`` (``curated``).
"""

from kvtool.releases.curated import (
    backend_connector,
    backend_connector_map,
    bundling_pins,
    flag_replacements,
    replacements,
    security_floor,
    semantic,
    semantic_facts,
)
from kvtool.releases.loader import (
    available_versions,
    connector_gate,
    env_var_gate,
    flag_gate,
    load_release,
    release_index,
    tier_gate,
)
from kvtool.releases.target import TargetRelease, resolve_target, version_from_image

__all__ = [
    "TargetRelease",
    "available_versions",
    "backend_connector",
    "backend_connector_map",
    "bundling_pins",
    "connector_gate",
    "env_var_gate",
    "flag_gate",
    "flag_replacements",
    "load_release",
    "release_index",
    "replacements",
    "resolve_target",
    "security_floor",
    "semantic",
    "semantic_facts",
    "tier_gate",
    "version_from_image",
]
