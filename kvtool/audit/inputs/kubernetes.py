"""Kubernetes manifests: the vLLM containers of every workload in a (multi-document) file.

Pod specs are found where each workload kind keeps them: Pod ``spec``;
Deployment, StatefulSet, DaemonSet, ReplicaSet, Job ``spec.template.spec``;
CronJob ``spec.jobTemplate.spec.template.spec``; LeaderWorkerSet
``spec.leaderWorkerTemplate.{leaderTemplate,workerTemplate}.spec``; ``List``
items recursively. A KAITO inference ConfigMap in the same file is read too.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import msgspec
import yaml

from kvtool.audit.inputs import kaito, yaml_tree
from kvtool.audit.inputs.container import (
    container_invocations,
    expand_k8s_vars,
    words_from_sequence,
)
from kvtool.audit.inputs.shell import ShellContext
from kvtool.audit.inputs.suppressions import (
    ANNOTATION,
    annotation_suppressions,
    yaml_comment_suppressions,
)
from kvtool.audit.model import EnvAssignment, Invocation, Suppression

_TEMPLATE_KINDS = frozenset({"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"})


def read_manifests(text: str, file: str | None, base_dir: Path | None) -> list[Invocation]:
    comments = yaml_comment_suppressions(text, file)
    found: list[Invocation] = []
    for document in yaml_tree.compose_documents(text, file):
        found.extend(_document(document, text, file, base_dir, comments))
    return found


def _document(
    root: yaml.Node,
    text: str,
    file: str | None,
    base_dir: Path | None,
    comments: list[Suppression],
) -> list[Invocation]:
    kind = yaml_tree.scalar(yaml_tree.get(root, "kind")) or ""
    if kind == "List":
        return [
            invocation
            for item in yaml_tree.sequence(yaml_tree.get(root, "items"))
            for invocation in _document(item, text, file, base_dir, comments)
        ]
    if kind == "ConfigMap":
        return kaito.read_configmap(root, text, file, comments)
    name = yaml_tree.scalar(yaml_tree.get_path(root, "metadata", "name")) or "?"
    first, last = root.start_mark.line + 1, root.end_mark.line + 1
    local_comments = tuple(c for c in comments if c.target_line and first <= c.target_line <= last)
    found: list[Invocation] = []
    for role, template in _pod_templates(root, kind):
        annotations = _annotation_suppressions(root, file) + _annotation_suppressions(
            template, file
        )
        pod_spec = yaml_tree.get(template, "spec")
        where = f"{kind}/{name}" + (f" {role}" if role else "")
        for container in _containers(pod_spec):
            found.extend(
                _container(container, text, file, base_dir, where, annotations + local_comments)
            )
    return found


def _pod_templates(root: yaml.Node, kind: str) -> Iterator[tuple[str, yaml.Node]]:
    """(role, node whose ``spec`` is a pod spec); the Pod itself for kind Pod."""
    if kind == "Pod":
        yield "", root
    elif kind in _TEMPLATE_KINDS:
        template = yaml_tree.get_path(root, "spec", "template")
        if template is not None:
            yield "", template
    elif kind == "CronJob":
        template = yaml_tree.get_path(root, "spec", "jobTemplate", "spec", "template")
        if template is not None:
            yield "", template
    elif kind == "LeaderWorkerSet":
        group = yaml_tree.get_path(root, "spec", "leaderWorkerTemplate")
        for role, key in (("leader", "leaderTemplate"), ("worker", "workerTemplate")):
            template = yaml_tree.get(group, key)
            if template is not None:
                yield role, template


def _containers(pod_spec: yaml.Node | None) -> Iterator[yaml.Node]:
    for key in ("initContainers", "containers"):
        yield from yaml_tree.sequence(yaml_tree.get(pod_spec, key))


def _annotation_suppressions(node: yaml.Node, file: str | None) -> tuple[Suppression, ...]:
    annotations = yaml_tree.get_path(node, "metadata", "annotations")
    value_node = yaml_tree.get(annotations, ANNOTATION)
    value = yaml_tree.scalar(value_node)
    if value is None or value_node is None:
        return ()
    return tuple(annotation_suppressions(value, yaml_tree.location(value_node, file)))


def _container(
    container: yaml.Node,
    text: str,
    file: str | None,
    base_dir: Path | None,
    where: str,
    suppressions: tuple[Suppression, ...],
) -> list[Invocation]:
    name = yaml_tree.scalar(yaml_tree.get(container, "name")) or "?"
    image = yaml_tree.scalar(yaml_tree.get(container, "image"))
    env = tuple(_env(container, file))
    command_node = yaml_tree.get(container, "command")
    words = words_from_sequence(command_node, file) + words_from_sequence(
        yaml_tree.get(container, "args"), file
    )
    context = ShellContext(
        file=file,
        kind="kubernetes",
        base_dir=base_dir,
        env=env,
        image=image,
        label=f"{file or '<input>'}: {where} container {name}",
        suppressions=suppressions,
    )
    found = container_invocations(
        expand_k8s_vars(words, env), text, context, entrypoint_is_image=command_node is None
    )
    if yaml_tree.get(container, "envFrom") is not None:
        note = f"container {name}: envFrom variables come from the cluster and were not read"
        found = [msgspec.structs.replace(i, notes=(*i.notes, note)) for i in found]
    return found


def _env(container: yaml.Node, file: str | None) -> Iterator[EnvAssignment]:
    for item in yaml_tree.sequence(yaml_tree.get(container, "env")):
        name_node = yaml_tree.get(item, "name")
        name = yaml_tree.scalar(name_node)
        if name is None or name_node is None:
            continue
        value_node = yaml_tree.get(item, "value")
        value = yaml_tree.scalar(value_node) if value_node is not None else None
        if value_node is not None and value is None:
            value = ""  # `value:` with nothing after it is the empty string to the kubelet
        yield EnvAssignment(name=name, value=value, location=yaml_tree.location(name_node, file))
