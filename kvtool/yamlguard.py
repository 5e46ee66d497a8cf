"""Bound the work a YAML node graph can cause before any reader walks it.

PyYAML composes an alias as a second reference to the anchored node, so nine lines
of ``&b [*a, *a, ...]`` make a graph of a few dozen nodes that is a tree of hundreds
of millions once walked or constructed, and ``&a [*a]`` makes a cycle. Each document
is measured once, in time linear in its distinct nodes: its size with every alias
followed, its alias references, its depth; a cycle or a measure over its limit in
:mod:`kvtool.limits` is refused with ``LimitExceeded`` before any reader sees it.

The node and alias limits hold for a whole input file, not each document of it: YAML
embedded in a string of the file (a KAITO preset's config, a Ray Serve app's args) is
composed later, and would otherwise start a fresh count per document. A reader of one
file runs inside :func:`file_budget`; every document composed meanwhile draws on it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvtool import limits

if TYPE_CHECKING:  # imported when a document is checked: a shell script's run needs no YAML
    import yaml


@dataclass
class _Budget:
    nodes: float
    aliases: float


_FILE_BUDGET: ContextVar[_Budget | None] = ContextVar("kvtool_yaml_file_budget", default=None)


@contextmanager
def file_budget() -> Iterator[None]:
    """One node and alias budget for every YAML document composed inside (one file)."""
    token = _FILE_BUDGET.set(_Budget(limits.YAML_NODES.value, limits.YAML_ALIASES.value))
    try:
        yield
    finally:
        _FILE_BUDGET.reset(token)


def _children(
    node: yaml.Node, sequence: type[yaml.SequenceNode], mapping: type[yaml.MappingNode]
) -> list[yaml.Node]:
    if isinstance(node, sequence):
        return list(node.value)
    if isinstance(node, mapping):
        return [part for pair in node.value for part in pair]
    return []


def check_document(root: yaml.Node, where: str) -> None:
    """Raise ``LimitExceeded`` for a cyclic, too deep, too aliased or too large document."""
    import yaml

    sequence, mapping = yaml.SequenceNode, yaml.MappingNode
    budget = _FILE_BUDGET.get()
    max_nodes = budget.nodes if budget is not None else limits.YAML_NODES.value
    max_aliases = budget.aliases if budget is not None else limits.YAML_ALIASES.value
    max_depth = limits.NESTING_DEPTH.value
    expanded: dict[int, int] = {}  # id(node) -> node count of its subtree, aliases followed
    open_nodes: set[int] = set()  # on the current path: reaching one again is a cycle
    aliases = 0
    stack: list[tuple[yaml.Node, int, bool]] = [(root, 1, False)]
    while stack:
        node, depth, done = stack.pop()
        key = id(node)
        if done:
            open_nodes.discard(key)
            size = 1 + sum(expanded[id(child)] for child in _children(node, sequence, mapping))
            if size > max_nodes:
                raise limits.LimitExceeded(limits.YAML_NODES.message(where))
            expanded[key] = size
            continue
        if key in open_nodes:
            raise limits.LimitExceeded(f"{where}: a YAML alias refers to a node that contains it")
        if key in expanded:
            aliases += 1
            if aliases > max_aliases:
                raise limits.LimitExceeded(limits.YAML_ALIASES.message(where))
            continue
        if depth > max_depth:
            raise limits.LimitExceeded(limits.NESTING_DEPTH.message(where))
        open_nodes.add(key)
        stack.append((node, depth, True))
        stack.extend((child, depth + 1, False) for child in _children(node, sequence, mapping))
    if budget is not None:  # what this document used is gone for the file's next ones
        budget.nodes -= expanded[id(root)]
        budget.aliases -= aliases
