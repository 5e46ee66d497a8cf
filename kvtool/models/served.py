"""Whether a vLLM release serves a model's architecture, from that release's model registry.

The release tables (``rules/releases/<version>.json``, generated from each wheel's
``model_executor/models/registry.py``) list the architectures a release implements, those
it serves only through its Transformers backend, and those it no longer serves with the
last release that did. A table generated before the registry was read has none of it,
and then nothing is refused here.
"""

from __future__ import annotations

from kvtool.errors import KvtoolError
from kvtool.models.source import ModelConfig


def refusal(found: ModelConfig, version: str, *, layout_known: bool) -> str | None:
    """Why vLLM ``version`` cannot run ``found`` as kvtool would size it, or None.

    An architecture the registry lists as previously supported is refused (vLLM raises at
    start-up). One served only through the Transformers backend is refused when kvtool
    knows no cache layout for the config (``layout_known``): that backend's layers are
    the checkpoint's own, so kvtool cannot tell their cache apart from the config.
    """
    from kvtool.releases import load_release

    facts = load_release(version)
    registry = facts.model_registry
    if registry is None:
        return None
    where = f"its model registry, {registry.source}"
    for arch in found.architectures:
        if arch in registry.native:
            return None
        last = registry.previously_supported.get(arch)
        if last is not None:
            return (
                f"{found.where}: vLLM {facts.version} no longer serves {arch}: "
                f"supported until v{last} ({where})"
            )
        backend = registry.transformers_backend.get(arch)
        if backend is not None and not layout_known:
            return (
                f"{found.where}: vLLM {facts.version} serves {arch} only through its "
                f"Transformers backend ({backend}; {where}), whose cache layout kvtool "
                "size does not know"
            )
    return None


def check_served(found: ModelConfig, version: str, *, layout_known: bool) -> None:
    """Raise :class:`KvtoolError` with :func:`refusal`'s line when there is one."""
    reason = refusal(found, version, layout_known=layout_known)
    if reason is not None:
        raise KvtoolError(reason)
