"""Patches written in a ``kustomization.yaml``: strategic-merge and JSON 6902.

``patches: [{patch: |- ...}]`` and ``patchesStrategicMerge: [|- ...]`` carry whole
manifests as strings (https://kubectl.docs.kubernetes.io/references/kustomize/
kustomization/patches/; kubernetes-sigs/kustomize examples/inlinePatch.md). Each string
is read as a manifest and every location is mapped back to the kustomization file.

JSON 6902 patches (``- op: add`` with a ``target``, inline or in a patch file, under
``patches:`` or ``patchesJson6902:``; kubernetes-sigs/kustomize examples/jsonpatch.md)
name no container: they are applied to the objects they target among the
kustomization's ``resources`` (files and kustomization directories, read relative to
it, as ``kustomize build`` does), and each patched object is read. A word the patch
added is located in the patch, the others in the base.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import msgspec
import yaml

from kvtool.audit.inputs import json_patch, yaml_tree
from kvtool.audit.inputs.detect import KUSTOMIZATION_NAMES
from kvtool.audit.inputs.positions import LineIndex, OffsetMap
from kvtool.audit.inputs.source import ReadSource
from kvtool.audit.model import Invocation, Location
from kvtool.errors import KvtoolError
from kvtool.fsio import read_input_text

Reader = Callable[[str, ReadSource], list[Invocation]]
# Reads one (patched) object of a file: (object node, the file's text, its source).
ObjectReader = Callable[[yaml.Node, str, ReadSource], list[Invocation]]
KUSTOMIZATION_FILES = (*KUSTOMIZATION_NAMES, "Kustomization")
# How deep kustomization directories may refer to each other (kustomize refuses cycles).
_MAX_DEPTH = 8


def is_kustomization(node: yaml.Node, kind: str, file: str | None) -> bool:
    """A Kustomization: by its kind, or by its file name (``apiVersion``/``kind`` are
    optional in a kustomization file)."""
    if kind == "Kustomization":
        return True
    return not kind and file is not None and os.path.basename(file) in KUSTOMIZATION_FILES


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


@dataclass
class _Resource:
    node: yaml.Node
    text: str
    file: str
    patched: bool = False


@dataclass(frozen=True)
class _Json6902:
    target: yaml.Node
    operations: list[json_patch.Operation]
    where: str  # the patch, for notes


def read_json6902(
    node: yaml.Node, text: str, source: ReadSource, read_object: ObjectReader
) -> list[Invocation]:
    """The invocations of the resources a Kustomization's JSON 6902 patches target,
    patched; nothing when it has no such patch or its resources cannot be found."""
    if source.base_dir is None:
        return []
    here = str(source.base_dir)
    patches = list(_json6902_patches(node, text, source.file, here))
    if not patches:
        return []
    notes: list[str] = []
    resources = list(_resources(node, here, 0, _Walk(notes, {os.path.realpath(here)})))
    budget = json_patch.CopyBudget(f"JSON patches of {source.file or '<input>'}")
    for patch in patches:
        targets = [r for r in resources if _targets(patch.target, r.node)]
        if not targets:
            notes.append(f"{patch.where}: its target is not among the resources read")
        for resource in targets:
            for operation in patch.operations:
                problem = json_patch.apply(resource.node, operation, budget)
                if problem is not None:
                    notes.append(f"{patch.where}: {problem}")
            resource.patched = True
    overlay = f" (kustomize overlay {source.file or '<input>'})"
    shown = _summarised(notes)
    found: list[Invocation] = []
    for resource in resources:
        if not resource.patched:
            continue
        base = ReadSource(resource.file, Path(os.path.dirname(resource.file)), source.configmaps)
        for invocation in read_object(resource.node, resource.text, base):
            found.append(
                msgspec.structs.replace(
                    invocation,
                    label=invocation.label + overlay,
                    notes=invocation.notes + shown,
                )
            )
    return found


# Notes one overlay adds to each object it patches: 100,000 listed resources or failing
# operations would otherwise be 100,000 lines on every container of the base.
_MOST_NOTES = 20


def _summarised(notes: list[str]) -> tuple[str, ...]:
    if len(notes) <= _MOST_NOTES:
        return tuple(notes)
    left = len(notes) - _MOST_NOTES
    return (*notes[:_MOST_NOTES], f"... and {left} more notes of this kustomization")


def _json6902_patches(
    node: yaml.Node, text: str, file: str | None, here: str
) -> Iterator[_Json6902]:
    items = yaml_tree.sequence(yaml_tree.get(node, "patches"))
    items += yaml_tree.sequence(yaml_tree.get(node, "patchesJson6902"))
    for item in items:
        target = yaml_tree.get(item, "target")
        if target is None:
            continue
        inline = yaml_tree.get(item, "patch")
        path = yaml_tree.scalar(yaml_tree.get(item, "path"))
        if isinstance(inline, yaml.ScalarNode):
            inner = str(inline.value)
            start, end = yaml_tree.scalar_source_span(inline, text)
            embedded = json_patch.Embedded(inner, text, start, end)
            found = _operations(inner, file, embedded)
            where = yaml_tree.where(inline, file)
        elif path is not None:
            patch_file = os.path.normpath(os.path.join(here, path))
            if not _inside(patch_file, here):
                continue  # kustomize's load restrictor refuses it too
            try:
                found = _operations(read_input_text(patch_file), patch_file, None)
            except KvtoolError:
                found = None
            where = patch_file
        else:
            continue
        if found is not None:
            yield _Json6902(target, found, where)


def _operations(
    text: str, file: str | None, embedded: json_patch.Embedded | None
) -> list[json_patch.Operation] | None:
    try:
        documents = yaml_tree.compose_documents(text, file)
    except KvtoolError:
        return None
    found = json_patch.operations(documents[0]) if documents else None
    if found is not None:
        json_patch.graft(documents[0], file, embedded)
    return found


@dataclass
class _Walk:
    """One walk of a kustomization's resources: what was read, and what was not and why.

    Each directory and file is read once: kustomize refuses a cycle and a resource
    listed twice, and reading ``resources: [., ., .]`` again at each level would take
    time exponential in the depth.
    """

    notes: list[str]
    seen: set[str]


def _inside(path: str, root: str) -> bool:
    """Whether ``path`` (symbolic links followed) lies in the directory ``root``."""
    real, real_root = os.path.realpath(path), os.path.realpath(root)
    return real == real_root or real.startswith(real_root.rstrip(os.sep) + os.sep)


def _outside_note(name: str, root: str) -> str:
    return (
        f"resource {name!r} is outside {root}: not read (kustomize's default load "
        "restrictor allows only files within the kustomization's directory)"
    )


def _resources(node: yaml.Node, here: str, depth: int, walk: _Walk) -> Iterator[_Resource]:
    """The objects of a Kustomization's ``resources`` (and legacy ``bases``), in order.

    A file must lie within the kustomization's directory, as kustomize's default load
    restrictor (``LoadRestrictionsRootOnly``) requires; another kustomization directory
    (``../base``) may lie anywhere, and its files within it.
    """
    entries = yaml_tree.sequence(yaml_tree.get(node, "resources"))
    entries += yaml_tree.sequence(yaml_tree.get(node, "bases"))
    for entry in entries:
        name = yaml_tree.scalar(entry)
        if name is None or "://" in name or name.startswith(("github.com/", "git@")):
            continue  # a remote base: not on this machine
        path = os.path.normpath(os.path.join(here, name))
        is_directory = os.path.isdir(path)
        if not is_directory and not _inside(path, here):
            walk.notes.append(_outside_note(name, here))
            continue
        real = os.path.realpath(path)
        if real in walk.seen:
            walk.notes.append(f"resource {name!r}: {path} was read already; not read again")
            continue
        walk.seen.add(real)
        if is_directory:
            yield from _directory(path, depth, walk)
            continue
        try:
            text = read_input_text(path)
            documents = yaml_tree.compose_documents(text, path)
        except KvtoolError as error:
            walk.notes.append(f"resource {name!r}: {error}")
            continue
        for document in documents:
            for obj in _objects(document):
                yield _Resource(obj, text, path)


def _directory(path: str, depth: int, walk: _Walk) -> Iterator[_Resource]:
    if depth >= _MAX_DEPTH:
        walk.notes.append(f"{path}: kustomizations nested too deeply; not read")
        return
    for name in KUSTOMIZATION_FILES:
        kustomization = os.path.join(path, name)
        if os.path.isfile(kustomization):
            try:
                documents = yaml_tree.compose_documents(
                    read_input_text(kustomization), kustomization
                )
            except KvtoolError as error:
                walk.notes.append(str(error))
                return
            for document in documents:
                yield from _resources(document, path, depth + 1, walk)
            return
    walk.notes.append(f"{path}: a directory without a kustomization file; not read")


def _objects(document: yaml.Node) -> Iterator[yaml.Node]:
    yield document
    if yaml_tree.scalar(yaml_tree.get(document, "kind")) == "List":
        for item in yaml_tree.sequence(yaml_tree.get(document, "items")):
            yield from _objects(item)


def _targets(target: yaml.Node, obj: yaml.Node) -> bool:
    """Whether a patch ``target`` (kind, name, group, version) selects ``obj``; the
    name is a regular expression, as kustomize's ``patches`` reads it."""
    kind = yaml_tree.scalar(yaml_tree.get(target, "kind"))
    name = yaml_tree.scalar(yaml_tree.get(target, "name"))
    group = yaml_tree.scalar(yaml_tree.get(target, "group"))
    version = yaml_tree.scalar(yaml_tree.get(target, "version"))
    api = yaml_tree.scalar(yaml_tree.get(obj, "apiVersion")) or ""
    obj_group, _, obj_version = api.rpartition("/")
    obj_name = yaml_tree.scalar(yaml_tree.get_path(obj, "metadata", "name")) or ""
    if kind is not None and kind != yaml_tree.scalar(yaml_tree.get(obj, "kind")):
        return False
    if (group is not None and group != obj_group) or (
        version is not None and version != obj_version
    ):
        return False
    if name is None:
        return True
    if not _tame(name) or len(obj_name) > _MOST_NAME_CHARS:
        return name == obj_name
    try:
        return re.fullmatch(name, obj_name) is not None
    except re.error:
        return name == obj_name


# Kubernetes object names are DNS subdomains: at most 253 characters.
_MOST_NAME_CHARS = 253
# kustomize matches with Go's regexp (linear time); Python's backtracks. A quantified
# group (``(a+)+``, ``(a|a)*``, ``(a?){30}``) takes exponential time, and each
# unbounded quantifier multiplies the work by the name's length: such a pattern is
# compared as a plain name.
_QUANTIFIED_GROUP = re.compile(r"\)[*+{]")
_UNBOUNDED = re.compile(r"(?<!\\)(?:[*+]|\{\d*,\d*\})")
_BACKREFERENCE = re.compile(r"\\[1-9]|\(\?P=")
_MOST_UNBOUNDED = 2


def _tame(pattern: str) -> bool:
    """Whether ``pattern`` matches a name in time about linear in its length."""
    return (
        _QUANTIFIED_GROUP.search(pattern) is None
        and _BACKREFERENCE.search(pattern) is None
        and len(_UNBOUNDED.findall(pattern)) <= _MOST_UNBOUNDED
    )
