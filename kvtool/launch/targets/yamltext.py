"""YAML output for manifests: block style, keys in insertion order, no anchors.

PyYAML writes ``&id001`` anchors for a dict used twice (labels reused as selectors);
valid, but unreadable in a manifest a person reviews, so aliases are turned off.
Multi-line strings are written as literal blocks.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import yaml


class _PlainDumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True


def _text(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    # Multi-line values (an embedded config file) read best as literal blocks.
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_PlainDumper.add_representer(str, _text)


def dump(document: Any) -> str:
    return yaml.dump(document, Dumper=_PlainDumper, sort_keys=False, width=1000)


def dump_all(documents: Iterable[Any]) -> str:
    return yaml.dump_all(documents, Dumper=_PlainDumper, sort_keys=False, width=1000)
