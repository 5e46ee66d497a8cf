"""The engine's default :class:`~kvtool.audit.engine.Tables`: the shipped ``rules/`` data.

Release tables and the index come from :mod:`kvtool.releases`, curated security and
known-bug rows from ``rules/curated/``, the audit's semantic rows from
``rules/audit/semantics.toml``, and model facts from the sizing catalog (or a local
config.json) when the served model is known. Each is loaded at most once per process.
"""

from __future__ import annotations

from functools import cache

from kvtool.audit.context import ModelFacts, Semantics
from kvtool.audit.engine import Target
from kvtool.audit.semantics import load_semantics
from kvtool.errors import KvtoolError
from kvtool.releases.model import ReleaseFacts, ReleaseIndex


class ShippedTables:
    """Reads the tables shipped with kvtool."""

    def target(
        self, requested: str | None, image: str | None, *, origin: str = "--vllm-version"
    ) -> Target:
        return _target(requested, image, origin)

    def release(self, version: str) -> ReleaseFacts:
        from kvtool.releases import load_release

        return load_release(version)

    def index(self) -> ReleaseIndex:
        from kvtool.releases import release_index

        return release_index()

    def semantics(self) -> Semantics:
        return load_semantics()

    def model(self, name: str) -> ModelFacts | None:
        return _model_facts(name)


@cache
def _target(requested: str | None, image: str | None, origin: str) -> Target:
    """The release table for one (version, image): most engines of a tree share an image."""
    from kvtool.releases import resolve_target

    resolved = resolve_target(requested, image, origin=origin)
    return Target(
        vllm_version=resolved.version,
        source=resolved.source,
        warning=resolved.warning,
        origin=resolved.origin,
        exact=resolved.exact,
    )


@cache
def _model_facts(name: str) -> ModelFacts | None:
    """Facts about ``name`` from a local config.json (``name`` a path) or the family table;
    None when neither knows it (an unreadable local config.json counts as unknown here)."""
    from kvtool.models import identify

    try:
        identity = identify(name)
    except (KvtoolError, OSError, ValueError):
        return None
    return ModelFacts.from_identity(identity) if identity is not None else None
