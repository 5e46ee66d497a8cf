"""Bound the work a YAML node graph can cause before any reader walks it.

PyYAML composes an alias as a second reference to the anchored node, so nine lines
of ``&b [*a, *a, ...]`` make a graph of a few dozen nodes that is a tree of hundreds
of millions once walked or constructed, and ``&a [*a]`` makes a cycle. Each document
is measured once, in time linear in its distinct nodes: its size with every alias
followed, its alias references, its depth; a cycle or a measure over its limit in
:mod:`kvtool.limits` is refused with ``LimitExceeded`` before any reader sees it.
"""

from __future__ import annotations

import yaml

from kvtool import limits


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def check_document(root: yaml.Node, where: str) -> None:
    """Raise ``LimitExceeded`` for a cyclic, too deep, too aliased or too large document."""
    max_nodes = limits.YAML_NODES.value
    max_aliases = limits.YAML_ALIASES.value
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
            size = 1 + sum(expanded[id(child)] for child in _children(node))
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
        stack.extend((child, depth + 1, False) for child in _children(node))
