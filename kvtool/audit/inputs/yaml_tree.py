"""PyYAML node-tree helpers: values together with the line and column they were written at.

Readers walk the composed node tree (``yaml.compose_all``) rather than loaded
dicts, because only nodes carry ``start_mark``; values are constructed per node
with PyYAML's safe constructor so their types match ``yaml.safe_load``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import yaml

from kvtool.audit.model import Location
from kvtool.errors import KvtoolError
from kvtool.yamlguard import check_document
from kvtool.yamlio import safe_loader

# libyaml's composer gives the same node marks as the pure-Python one, about ten times
# faster; batches of manifests spend most of their time here.
_LOADER = safe_loader()


def compose_documents(text: str, file: str | None) -> list[yaml.Node]:
    """Every non-empty document; malformed YAML raises ``KvtoolError`` naming file:line:col.

    Each document's size with aliases followed, and its depth, are checked first
    (:func:`kvtool.yamlguard.check_document`): alias bombs and cycles never reach a reader.
    """
    try:
        documents = [node for node in yaml.compose_all(text, Loader=_LOADER) if node is not None]
        for document in documents:
            check_document(document, where(document, file))
        return documents
    except yaml.MarkedYAMLError as error:
        raise KvtoolError(
            f"{_where(file, error.problem_mark)}: invalid YAML: {error.problem or _one_line(error)}"
        ) from None
    except yaml.YAMLError as error:
        raise KvtoolError(f"{file or '<input>'}: invalid YAML: {_one_line(error)}") from None
    except RecursionError:
        raise KvtoolError(f"{file or '<input>'}: YAML nested too deeply to read") from None


def construct(node: yaml.Node, file: str | None) -> Any:
    """The Python value of ``node``, as ``yaml.safe_load`` would build it."""
    constructor = yaml.constructor.SafeConstructor()
    try:
        return constructor.construct_document(node)
    except yaml.MarkedYAMLError as error:
        raise KvtoolError(
            f"{_where(file, error.problem_mark)}: invalid YAML: {error.problem or _one_line(error)}"
        ) from None
    except (yaml.YAMLError, TypeError, ValueError) as error:
        raise KvtoolError(
            f"{_where(file, node.start_mark)}: invalid YAML value: {_one_line(error)}"
        ) from None
    except RecursionError:
        raise KvtoolError(f"{_where(file, node.start_mark)}: YAML nested too deeply") from None


def _one_line(error: Exception) -> str:
    """PyYAML messages span lines ('in "<unicode string>", line 1'): keep the first."""
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__


def _where(file: str | None, mark: yaml.Mark | None) -> str:
    if mark is None:
        return file or "<input>"
    return f"{file or '<input>'}:{mark.line + 1}:{mark.column + 1}"


def location(node: yaml.Node, file: str | None) -> Location:
    start, end = node.start_mark, node.end_mark
    same_line = end is not None and end.line == start.line
    return Location(
        file=file,
        line=start.line + 1,
        column=start.column + 1,
        end_column=end.column + 1 if same_line else None,
    )


def where(node: yaml.Node, file: str | None) -> str:
    """``file:line:col`` of a node, for error messages."""
    return _where(file, node.start_mark)


def items(node: yaml.Node | None) -> Iterator[tuple[str, yaml.Node, yaml.Node]]:
    """(key text, key node, value node) of a mapping node; nothing for other nodes."""
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode):
                yield str(key.value), key, value


def get(node: yaml.Node | None, key: str) -> yaml.Node | None:
    for name, _, value in items(node):
        if name == key:
            return value
    return None


def get_path(node: yaml.Node | None, *keys: str) -> yaml.Node | None:
    for key in keys:
        node = get(node, key)
    return node


def scalar(node: yaml.Node | None) -> str | None:
    """The text of a scalar node (None for missing, null or non-scalar nodes)."""
    if isinstance(node, yaml.ScalarNode) and node.tag != "tag:yaml.org,2002:null":
        return str(node.value)
    return None


def sequence(node: yaml.Node | None) -> list[yaml.Node]:
    return list(node.value) if isinstance(node, yaml.SequenceNode) else []


def scalar_source_span(node: yaml.Node, text: str) -> tuple[int, int]:
    """Offsets of a node's written form in the source text (quotes and indicators included)."""
    return node.start_mark.index, node.end_mark.index if node.end_mark else len(text)
