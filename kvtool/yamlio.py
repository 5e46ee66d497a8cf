"""One YAML reader for kvtool's shipped data tables and recipes.

libyaml's loader (``CSafeLoader``) parses about ten times faster than the
pure-Python one and builds the same values; the audit's cold start reads several
tables, so every data file goes through here. PyYAML is imported on first use.
"""

from __future__ import annotations

from typing import Any


def safe_load(text: str) -> Any:
    """``yaml.safe_load(text)`` through libyaml when PyYAML was built with it."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return yaml.load(text, Loader=loader)
