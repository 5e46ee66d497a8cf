"""PyYAML node-tree helpers: values together with the line and column they were written at.

Readers walk the composed node tree (``yaml.compose_all``) rather than loaded
dicts, because only nodes carry ``start_mark``; values are constructed per node
with PyYAML's safe constructor so their types match ``yaml.safe_load``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import yaml

from kvtool.audit.inputs.positions import LineIndex, OffsetMap
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


# A node grafted into another file's tree (a kustomize JSON patch's value) carries the
# name of the file it was written in under this attribute; its marks are in that file.
ORIGIN_FILE = "kvtool_origin_file"


def location(node: yaml.Node, file: str | None) -> Location:
    file = getattr(node, ORIGIN_FILE, file)
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


_MERGE = "tag:yaml.org,2002:merge"


def items(
    node: yaml.Node | None, _merging: frozenset[int] = frozenset()
) -> Iterator[tuple[str, yaml.Node, yaml.Node]]:
    """(key text, key node, value node) of a mapping node; nothing for other nodes.

    A merge key (``<<: *defaults``, common in compose files) yields the merged
    mapping's items in its place, so a key written after it wins in :func:`get`.
    """
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode) and key.tag == _MERGE:
                merged = value.value if isinstance(value, yaml.SequenceNode) else [value]
                for source in merged:
                    if id(source) not in _merging and source is not node:
                        yield from items(source, _merging | {id(node)})
            elif isinstance(key, yaml.ScalarNode):
                yield str(key.value), key, value


def get(node: yaml.Node | None, key: str) -> yaml.Node | None:
    """The value of ``key``; of a key written twice, the last, as Kubernetes' decoder keeps."""
    found: yaml.Node | None = None
    for name, _, value in items(node):
        if name == key:
            found = value
    return found


def duplicate_keys(node: yaml.Node, file: str | None) -> list[str]:
    """One note per key written twice in the same mapping, anywhere below ``node``."""
    notes: list[str] = []
    stack = [node]
    seen: set[int] = set()  # an alias makes a node appear twice, or inside itself
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, yaml.MappingNode):
            first: dict[str, yaml.Node] = {}
            for key, value in current.value:
                if isinstance(key, yaml.ScalarNode):
                    if key.value in first:
                        notes.append(
                            f"{where(key, file)}: key {key.value!r} is written twice (first at "
                            f"line {first[key.value].start_mark.line + 1}); the last one wins"
                        )
                    first[key.value] = key
                stack.append(value)
        elif isinstance(current, yaml.SequenceNode):
            stack.extend(current.value)
    return sorted(notes)


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


def scalar_script(
    node: yaml.Node | None, text: str, index: LineIndex
) -> tuple[str, Callable[[int, int], Location]] | None:
    """A script written as one YAML scalar (a ``run:`` step, an ``entrypoint``), with a
    function that maps offsets in the script to where they stand in ``text``; None when
    ``node`` is no scalar."""
    script = scalar(node)
    if script is None or not isinstance(node, yaml.ScalarNode):
        return None
    start, end = scalar_source_span(node, text)
    mapping = OffsetMap.align(script, text, start, end)

    def locate(begin: int, finish: int) -> Location:
        return index.location(mapping.to_source(begin), mapping.to_source(finish))

    return script, locate
