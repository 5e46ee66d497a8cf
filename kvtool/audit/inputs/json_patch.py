"""JSON Patch (RFC 6902) ``add``/``replace``/``remove`` applied to a composed YAML node tree.

Kustomize applies such patches to the manifests it builds
(https://kubectl.docs.kubernetes.io/references/kustomize/kustomization/patchesjson6902/).
Working on nodes, not loaded values, keeps every value's line: the base's words stay
where the base wrote them, a patch's ``value`` where the patch wrote it (see
:func:`graft`).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import yaml

from kvtool import limits
from kvtool.audit.inputs import yaml_tree
from kvtool.audit.inputs.positions import LineIndex, OffsetMap

_STR = "tag:yaml.org,2002:str"
OPS = frozenset({"add", "replace", "remove"})


@dataclass(frozen=True)
class Operation:
    op: str
    path: str
    value: yaml.Node | None
    at: yaml.Node  # the operation's mapping, for messages


def operations(root: yaml.Node | None) -> list[Operation] | None:
    """The operations of a patch document (a list of ``{op, path, value}``); None when
    the document is not a JSON patch."""
    items = yaml_tree.sequence(root)
    if not items or not all(yaml_tree.get(item, "op") is not None for item in items):
        return None
    found: list[Operation] = []
    for item in items:
        op = yaml_tree.scalar(yaml_tree.get(item, "op")) or ""
        path = yaml_tree.scalar(yaml_tree.get(item, "path")) or ""
        found.append(Operation(op, path, yaml_tree.get(item, "value"), item))
    return found


class CopyBudget:
    """Nodes the values of a run's operations may add, all targets together.

    Each applied value is a fresh copy: a patch whose YAML aliases share one value among
    operations, or add a value inside itself, would otherwise make the patched object a
    graph whose paths double with each operation, or a cycle. Copies keep the tree a
    tree, and the ``yaml_nodes`` limit bounds what they add.
    """

    def __init__(self, what: str) -> None:
        self.left = limits.YAML_NODES.count
        self.what = what

    def fresh(self, value: yaml.Node) -> yaml.Node:
        """A copy of ``value`` without shared nodes (marks and origin kept)."""
        top = copy.copy(value)
        stack = [top]
        while stack:
            node = stack.pop()
            self.left -= 1
            if self.left < 0:
                raise limits.LimitExceeded(limits.YAML_NODES.message(self.what))
            if isinstance(node, yaml.MappingNode):
                node.value = [(copy.copy(k), copy.copy(v)) for k, v in node.value]
                stack.extend(n for pair in node.value for n in pair)
            elif isinstance(node, yaml.SequenceNode):
                node.value = [copy.copy(item) for item in node.value]
                stack.extend(node.value)
        return top


def apply(root: yaml.Node, operation: Operation, budget: CopyBudget | None = None) -> str | None:
    """Apply one operation in place; a one-line reason when it cannot be applied.

    ``budget``: where the copies of applied values are counted (a fresh one per call
    when None).
    """
    if operation.op not in OPS:
        return f"op {operation.op!r} is not applied by kvtool"
    if not operation.path.startswith("/"):
        return f"path {operation.path!r} is not a JSON pointer"
    tokens = [_unescape(t) for t in operation.path[1:].split("/")]
    parent: yaml.Node | None = root
    for token in tokens[:-1]:
        parent = _child(parent, token)
    last = tokens[-1]
    if operation.op != "remove" and operation.value is None:
        return f"{operation.op} {operation.path} has no value"
    if operation.value is not None:
        budget = budget or CopyBudget(f"JSON patch {operation.path!r}")
        operation = Operation(
            operation.op, operation.path, budget.fresh(operation.value), operation.at
        )
    if isinstance(parent, yaml.MappingNode):
        return _apply_to_mapping(parent, last, operation)
    if isinstance(parent, yaml.SequenceNode):
        return _apply_to_sequence(parent, last, operation)
    return f"{operation.path}: no such place in the target"


def _apply_to_mapping(node: yaml.MappingNode, key: str, operation: Operation) -> str | None:
    pairs = [i for i, (k, _) in enumerate(node.value) if _key(k) == key]
    if operation.op == "remove":
        if not pairs:
            return f"{operation.path}: nothing to remove"
        node.value = [pair for i, pair in enumerate(node.value) if i not in pairs]
        return None
    assert operation.value is not None
    if pairs:
        index = pairs[-1]  # the value Kubernetes' decoder keeps
        node.value[index] = (node.value[index][0], operation.value)
    elif operation.op == "add":
        mark = operation.value.start_mark
        node.value.append((yaml.ScalarNode(_STR, key, mark, mark), operation.value))
    else:
        return f"{operation.path}: nothing to replace"
    return None


def _apply_to_sequence(node: yaml.SequenceNode, token: str, operation: Operation) -> str | None:
    size = len(node.value)
    if token == "-" and operation.op == "add":
        assert operation.value is not None
        node.value.append(operation.value)
        return None
    index = _index(token)
    if index is None or not 0 <= index <= size or (index == size and operation.op != "add"):
        return f"{operation.path}: index out of range"
    if operation.op == "remove":
        del node.value[index]
    elif operation.op == "add":
        assert operation.value is not None
        node.value.insert(index, operation.value)
    else:
        assert operation.value is not None
        node.value[index] = operation.value
    return None


def _child(node: yaml.Node | None, token: str) -> yaml.Node | None:
    if isinstance(node, yaml.SequenceNode):
        index = _index(token)
        return node.value[index] if index is not None and index < len(node.value) else None
    return yaml_tree.get(node, token)


# More digits than any list can have entries: ``int`` is not asked to read them.
_MOST_INDEX_DIGITS = 18


def _index(token: str) -> int | None:
    """A list index token (ASCII digits, as RFC 6901 writes them), or None."""
    if not (token.isascii() and token.isdigit()) or len(token) > _MOST_INDEX_DIGITS:
        return None
    return int(token)


def _key(node: yaml.Node) -> str | None:
    return str(node.value) if isinstance(node, yaml.ScalarNode) else None


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


@dataclass(frozen=True)
class Embedded:
    """A patch written as a string (``inner``) at ``outer[start:end]`` of its file."""

    inner: str
    outer: str
    start: int
    end: int


def graft(root: yaml.Node, file: str | None, embedded: Embedded | None) -> None:
    """Mark every node under ``root`` as written in ``file`` (see yaml_tree.ORIGIN_FILE).

    ``embedded``: set when the patch was a string inside ``file`` (an inline patch of
    kustomization.yaml); marks are moved from the string's coordinates to the file's.
    """
    mapping = index = None
    if embedded is not None:
        mapping = OffsetMap.align(embedded.inner, embedded.outer, embedded.start, embedded.end)
        index = LineIndex(embedded.outer, file)
    stack = [root]
    seen: set[int] = set()
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        setattr(node, yaml_tree.ORIGIN_FILE, file)
        if mapping is not None and index is not None:
            node.start_mark = _moved(node.start_mark, mapping, index)
            node.end_mark = _moved(node.end_mark, mapping, index)
        if isinstance(node, yaml.MappingNode):
            stack.extend(n for pair in node.value for n in pair)
        elif isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)


def _moved(mark: yaml.Mark, mapping: OffsetMap, index: LineIndex) -> yaml.Mark:
    offset = mapping.to_source(mark.index)
    line, column = index.line_col(offset)
    return yaml.Mark(mark.name, offset, line - 1, column - 1, None, 0)
