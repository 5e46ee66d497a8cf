"""Strategic-merge patches written inline in a ``kustomization.yaml``.

``patches: [{patch: |- ...}]`` and ``patchesStrategicMerge: [|- ...]`` carry whole
manifests as strings (https://kubectl.docs.kubernetes.io/references/kustomize/
kustomization/patches/; kubernetes-sigs/kustomize examples/inlinePatch.md). Each string
is read as a manifest and every location is mapped back to the kustomization file.
JSON 6902 patches (``- op: add``) name no container and are not read.
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec
import yaml

from kvtool.audit.inputs import yaml_tree
from kvtool.audit.inputs.positions import LineIndex, OffsetMap
from kvtool.audit.inputs.source import ReadSource
from kvtool.audit.model import Invocation, Location

Reader = Callable[[str, ReadSource], list[Invocation]]


def inline_patches(node: yaml.Node) -> list[yaml.ScalarNode]:
    """The inline strategic-merge patch strings of a Kustomization object."""
    found: list[yaml.ScalarNode] = []
    for item in yaml_tree.sequence(yaml_tree.get(node, "patches")):
        patch = yaml_tree.get(item, "patch")
        if isinstance(patch, yaml.ScalarNode):
            found.append(patch)
    for item in yaml_tree.sequence(yaml_tree.get(node, "patchesStrategicMerge")):
        if isinstance(item, yaml.ScalarNode) and "\n" in str(item.value):
            found.append(item)  # an inline patch (a path has no newline)
    return [p for p in found if "kind:" in str(p.value) and "- op:" not in str(p.value)]


def read_inline(
    patch: yaml.ScalarNode, text: str, source: ReadSource, read: Reader
) -> list[Invocation]:
    """The invocations of one inline patch, located in the kustomization file."""
    inner = str(patch.value)
    start, end = yaml_tree.scalar_source_span(patch, text)
    mapping = OffsetMap.align(inner, text, start, end)
    inner_index, outer_index = LineIndex(inner, source.file), LineIndex(text, source.file)

    def remap(location: Location | None) -> Location | None:
        if location is None or location.line is None:
            return location
        offset = inner_index.offset(location.line, location.column or 1)
        moved = outer_index.location(mapping.to_source(offset))
        width = (
            location.end_column - (location.column or 1)
            if location.end_column is not None and location.end_line is None
            else None
        )
        end_column = moved.column + width if width is not None and moved.column else None
        return msgspec.structs.replace(moved, end_column=end_column)

    found: list[Invocation] = []
    for invocation in read(inner, ReadSource(source.file, source.base_dir, source.configmaps)):
        found.append(
            msgspec.structs.replace(
                invocation,
                tokens=tuple(
                    msgspec.structs.replace(t, location=remap(t.location))
                    for t in invocation.tokens
                ),
                env=tuple(
                    msgspec.structs.replace(e, location=remap(e.location)) for e in invocation.env
                ),
                config_items=tuple((k, v, remap(loc)) for k, v, loc in invocation.config_items),
                suppressions=(),
                label=invocation.label + " (inline kustomize patch)",
            )
        )
    return found
