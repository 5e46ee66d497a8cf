"""A :class:`ModelSpec` for ``--model``: a config.json, a model directory or a catalog name."""

from __future__ import annotations

from kvtool.errors import KvtoolError
from kvtool.models.catalog import catalog, closest_name
from kvtool.models.source import ModelConfig, find_model_config
from kvtool.sizing.hf_config import has_layout, spec_from_config
from kvtool.sizing.spec import ModelSpec


def load_model_spec(path_or_name: str, *, release: str | None = None) -> ModelSpec:
    """A :class:`ModelSpec` from a config.json path, a model directory, or a catalog name.

    The model is found by :func:`kvtool.models.find_model_config`, the lookup every
    command shares. With ``release`` (a tabled vLLM version), an architecture that release
    no longer serves, or serves only through its Transformers backend when kvtool knows no
    layout for it, is refused with that fact (:mod:`kvtool.models.served`).
    """
    from kvtool.models.served import check_served

    found = find_model_config(path_or_name)
    if found is None:
        close = closest_name(path_or_name)
        hint = f"did you mean {close!r}? " if close else ""
        known = ", ".join(e.name for e in catalog())
        raise KvtoolError(
            f"--model {path_or_name!r}: no such file or directory, and not in the catalog; "
            f"{hint}pass a local config.json or model directory (catalog: {known})"
        )
    if release is not None:
        check_served(found, release, layout_known=has_layout(found.raw))
    return spec_from_model_config(found)


def spec_from_model_config(found: ModelConfig) -> ModelSpec:
    """The :class:`ModelSpec` of a config found by :func:`kvtool.models.find_model_config`."""
    return spec_from_config(
        found.raw,
        name=found.name,
        where=found.where,
        source=found.citation,
        quant_config=found.quant,
        quant_where=found.quant_where,
    )
