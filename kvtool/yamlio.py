"""One YAML reader for kvtool's shipped data tables, recipes and YAML inputs.

libyaml's loader (``CSafeLoader``) parses about ten times faster than the
pure-Python one and builds the same values and node marks; the audit's cold start
reads several tables, so every YAML read goes through here. PyYAML is imported on
first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import yaml


def safe_loader() -> type[yaml.SafeLoader]:
    """libyaml's safe loader when PyYAML was built with it, else the pure-Python one."""
    import yaml

    loader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return loader


def safe_load(text: str) -> Any:
    """``yaml.safe_load(text)`` through :func:`safe_loader`."""
    import yaml

    return yaml.load(text, Loader=safe_loader())
