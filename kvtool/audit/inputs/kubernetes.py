"""Kubernetes objects of any kind: every container of every PodSpec, at any depth.

Containers are found by shape, not by kind: every ``containers``/``initContainers`` list
of mappings anywhere in a document is a PodSpec's (Deployment, LeaderWorkerSet, Argo
Rollout, KServe InferenceService/ServingRuntime/LLMInferenceService, Ray
RayService/RayCluster/RayJob, AIBrix StormService, production-stack VLLMRuntime, a
Helm values file's container lists, ``kind: List`` items, kustomize patches). KServe's
``predictor.model`` and KubeAI's ``Model`` carry a container's fields without the list
and are read too; production-stack's ``VLLMRuntime`` is mapped as its operator maps it
(:mod:`.vllm_runtime`), a preset-only KAITO Workspace/InferenceSet as KAITO's controller
maps it (:mod:`.kaito_preset`). ConfigMaps: a KAITO inference ConfigMap is an invocation of
its own unless a preset workload of the same file reads it;
any ConfigMap of the input set resolves ``envFrom`` and ``valueFrom.configMapKeyRef``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

import msgspec
import yaml

from kvtool import limits
from kvtool.audit.inputs import (
    huggingface_server,
    kaito,
    kaito_preset,
    kserve,
    kserve_llm,
    kustomize,
    modelservice,
    pod,
    ray_serve,
    vllm_runtime,
    yaml_tree,
)
from kvtool.audit.inputs.command_line import ArgvWord
from kvtool.audit.inputs.configmap_files import mounted_files
from kvtool.audit.inputs.container import (
    ConfiguredCommand,
    container_invocations,
    expand_k8s_vars,
    words_from_node,
)
from kvtool.audit.inputs.container_resources import attach as attach_pod_resources
from kvtool.audit.inputs.detect import known_flag_spellings
from kvtool.audit.inputs.shell import ShellContext
from kvtool.audit.inputs.source import ConfigMaps, ReadSource
from kvtool.audit.inputs.suppressions import (
    ANNOTATION,
    annotation_suppressions,
    yaml_comment_suppressions,
)
from kvtool.audit.model import EnvAssignment, Invocation, Location, PodContainer, Suppression
from kvtool.releases.images import serve_entrypoint

_CONTAINER_LISTS = ("initContainers", "containers")
# One container written as a mapping: NVIDIA Dynamo's DynamoGraphDeployment
# ``services.<name>.extraPodSpec.mainContainer`` (ai-dynamo/dynamo
# examples/backends/vllm/deploy/*.yaml), merged by its operator into the pod it builds.
_MAIN_CONTAINER = "mainContainer"
# Keys on the way down to a PodSpec that say nothing about which pod it is.
_PLAIN_KEYS = frozenset(
    {"spec", "template", "podSpec", "podTemplate", "items", "jobTemplate", "extraPodSpec"}
)
_HELM_SOURCE = re.compile(r"^# Source: (\S+)", re.MULTILINE)


def read(text: str, source: ReadSource) -> list[Invocation]:
    comments = yaml_comment_suppressions(text, source.file)
    found: list[Invocation] = []
    documents = yaml_tree.compose_documents(text, source.file)
    configmaps = _local_configmaps(documents)
    # A ConfigMap a KAITO preset workload of this file reads joins its command.
    merged = kaito_preset.referenced_configmaps(documents)
    for document in documents:
        rendered_from = _helm_source(text, document)
        doc_notes = tuple(yaml_tree.duplicate_keys(document, source.file))
        if rendered_from:
            doc_notes += (f"rendered by Helm from {rendered_from}",)
        for invocation in _document(
            document, text, source, comments, rendered_from, configmaps, merged
        ):
            found.append(msgspec.structs.replace(invocation, notes=invocation.notes + doc_notes))
    if not found:
        ray_serve.skip_user_code(documents, text, source.file)
        kaito_preset.skip_preset_only(documents, source.file)
    return found


def _read_object(node: yaml.Node, text: str, source: ReadSource) -> list[Invocation]:
    """One object of a file (a kustomize base, patched), read as :func:`read` reads it."""
    comments = yaml_comment_suppressions(text, source.file)
    return _document(node, text, source, comments, _helm_source(text, node))


def configmaps_in(text: str, file: str | None) -> dict[str, dict[str, tuple[str, Location | None]]]:
    """The ConfigMaps of one file: name -> data key -> (value, where it was written)."""
    found: dict[str, dict[str, tuple[str, Location | None]]] = {}
    for document in yaml_tree.compose_documents(text, file):
        for node in _objects(document):
            if yaml_tree.scalar(yaml_tree.get(node, "kind")) != "ConfigMap":
                continue
            name = yaml_tree.scalar(yaml_tree.get_path(node, "metadata", "name"))
            if name is None:
                continue
            data = found.setdefault(name, {})
            for key, _, value_node in yaml_tree.items(yaml_tree.get(node, "data")):
                value = yaml_tree.scalar(value_node)
                if value is not None:
                    data[key] = (value, yaml_tree.location(value_node, file))
    return found


def _local_configmaps(documents: list[yaml.Node]) -> dict[str, yaml.Node]:
    found: dict[str, yaml.Node] = {}
    for document in documents:
        for node in _objects(document):
            if yaml_tree.scalar(yaml_tree.get(node, "kind")) == "ConfigMap":
                name = yaml_tree.scalar(yaml_tree.get_path(node, "metadata", "name"))
                if name is not None:
                    found[name] = node
    return found


def _objects(root: yaml.Node) -> Iterator[yaml.Node]:
    """The document and, for ``kind: List``, its items (recursively)."""
    yield root
    if yaml_tree.scalar(yaml_tree.get(root, "kind")) == "List":
        for item in yaml_tree.sequence(yaml_tree.get(root, "items")):
            yield from _objects(item)


def _helm_source(text: str, document: yaml.Node) -> str | None:
    """The ``# Source: chart/templates/x.yaml`` header Helm writes above a rendered document."""
    start = document.start_mark.index
    header_start = text.rfind("---", 0, start)
    matches = list(_HELM_SOURCE.finditer(text, max(header_start, 0), start))
    return matches[-1].group(1) if matches else None


@dataclass(frozen=True)
class _Found:
    container: yaml.Node
    role: str  # e.g. "leader", "predictor", "workerGroupSpecs[gpu]"; "" for the only pod
    pod: yaml.Node | None  # the mapping holding the container list (for its annotations)


def _document(
    root: yaml.Node,
    text: str,
    source: ReadSource,
    comments: list[Suppression],
    rendered_from: str | None,
    configmaps: dict[str, yaml.Node] | None = None,
    merged_configmaps: frozenset[str] = frozenset(),
) -> list[Invocation]:
    file = source.file
    found: list[Invocation] = []
    for node in _objects(root):
        kind = yaml_tree.scalar(yaml_tree.get(node, "kind")) or ""
        if kind == "List":
            continue
        if kind == "ConfigMap":
            name = yaml_tree.scalar(yaml_tree.get_path(node, "metadata", "name"))
            if name not in merged_configmaps:
                found.extend(kaito.read_configmap(node, text, file, comments))
            continue
        if kustomize.is_kustomization(node, kind, file):
            for patch in kustomize.inline_patches(node):
                found.extend(kustomize.read_inline(patch, text, source, read))
            found.extend(kustomize.read_json6902(node, text, source, _read_object))
            continue
        name = yaml_tree.scalar(yaml_tree.get_path(node, "metadata", "name")) or "?"
        first, last = node.start_mark.line + 1, node.end_mark.line + 1
        local = tuple(c for c in comments if c.target_line and first <= c.target_line <= last)
        owner = f"{kind}/{name}" if kind else "values"
        if rendered_from:
            owner += f" (from {rendered_from})"
        object_annotations = _annotation_suppressions(node, file)
        items = list(_containers(node))
        pod_siblings = _pod_siblings(items, text, file)
        for item in items:
            where = owner + (f" {item.role}" if item.role else "")
            suppressions = object_annotations + local
            if item.pod is not None:
                suppressions = _annotation_suppressions(item.pod, file) + suppressions
            configured = kserve_llm.main_command(
                node, kind, item.container, text, file
            ) or modelservice.configured_command(node, item.container, item.pod, file)
            mates = pod_siblings[id(item.container)] + modelservice.routing_proxy(
                node, item.container, item.pod, file
            )
            invocations = [
                msgspec.structs.replace(invocation, pod_containers=mates)
                for invocation in _container(
                    item.container, text, source, where, suppressions, configured, item.pod
                )
            ]
            invocations = attach_pod_resources(invocations, item.container, item.pod, file)
            if kind in kserve_llm.KINDS and configured is not None:
                invocations = kserve_llm.with_config_mounts(invocations)
            found.extend(invocations)
        found.extend(_kubeai_model(node, kind, text, source, owner, local))
        if kind == "RayService":
            found.extend(ray_serve.read_serve_config(node, text, source, owner, local))
        if kind == "RayJob":
            found.extend(ray_serve.read_job_entrypoint(node, text, source, owner, local))
        workload = kaito_preset.preset_workload(node)
        if workload is not None:
            found.extend(
                kaito_preset.read_workload(
                    workload, text, source, owner, object_annotations + local, configmaps or {}
                )
            )
        if vllm_runtime.is_vllm_runtime(node, kind):
            found.extend(vllm_runtime.read_runtime(node, text, source, owner, local))
    return found


def _containers(root: yaml.Node) -> Iterator[_Found]:
    """Every container below ``root``, with the role its position names."""
    stack: list[tuple[yaml.Node, str, yaml.Node | None]] = [(root, "", None)]
    seen: set[int] = set()  # an alias makes a node appear twice, or inside itself
    while stack:
        node, role, parent = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.SequenceNode):
            for index, item in reversed(list(enumerate(node.value))):
                label = yaml_tree.scalar(yaml_tree.get(item, "name")) or str(index)
                stack.append((item, f"{role}[{label}]" if role else role, node))
            continue
        if not isinstance(node, yaml.MappingNode):
            continue
        children: list[tuple[yaml.Node, str, yaml.Node | None]] = []
        for key, _, value in yaml_tree.items(node):
            if key in _CONTAINER_LISTS and isinstance(value, yaml.SequenceNode):
                for container in value.value:
                    if isinstance(container, yaml.MappingNode):
                        yield _Found(container, role, parent)
            elif key == _MAIN_CONTAINER and isinstance(value, yaml.MappingNode):
                yield _Found(value, role, parent)
            elif key == "model" and _is_kserve_model(value):
                yield _Found(value, role or "predictor", parent)
            elif key not in ("metadata", "status", "env", "envFrom"):
                children.append((value, _role(role, key), node))
        stack.extend(reversed(children))


def _pod_siblings(
    items: list[_Found], text: str, file: str | None
) -> dict[int, tuple[PodContainer, ...]]:
    """Each container's pod mates: containers under one pod template share its holder and
    role (a values file's ``prefill``/``decode`` lists share the holder, not the role)."""
    pods: dict[tuple[int, str], list[yaml.Node]] = {}
    for item in items:
        pods.setdefault((id(item.pod), item.role), []).append(item.container)
    found: dict[int, tuple[PodContainer, ...]] = {}
    for containers in pods.values():
        # Each container carries its mates and rules compare every engine with them:
        # work grows with the square of a pod's size, so the size is bounded.
        limits.POD_CONTAINERS.check(len(containers), file or "<input>")
        found.update(pod.siblings(containers, text, file))
    return found


def _role(role: str, key: str) -> str:
    if key in _PLAIN_KEYS:
        return role
    return key.removesuffix("Template") or key


def _is_kserve_model(node: yaml.Node) -> bool:
    """KServe's ``predictor.model``: a container's fields plus ``modelFormat``."""
    return isinstance(node, yaml.MappingNode) and yaml_tree.get(node, "modelFormat") is not None


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
    source: ReadSource,
    where: str,
    suppressions: tuple[Suppression, ...],
    configured: ConfiguredCommand | None = None,
    pod: yaml.Node | None = None,
) -> list[Invocation]:
    """``configured``: what a chart or operator runs when the container writes no
    ``command`` (llm-d-modelservice's ``modelCommand``, KServe's LLMInferenceService
    ``main``; see :mod:`.modelservice` and :mod:`.kserve_llm`)."""
    file = source.file
    name = yaml_tree.scalar(yaml_tree.get(container, "name")) or "?"
    image = _image(yaml_tree.get(container, "image"))
    env, notes = _env(container, source)
    command_node = yaml_tree.get(container, "command")
    words = words_from_node(command_node, text, file)
    if command_node is None and configured is not None:
        words = list(configured.words)
        env = tuple(e for e in env if e.name not in configured.consumed_env)
        notes.extend(configured.notes)
    args = words_from_node(yaml_tree.get(container, "args"), text, file)
    words = expand_k8s_vars(words + args, env)
    entrypoint_is_image = command_node is None and (
        configured is None or configured.runs_image_entrypoint
    )
    entrypoint: tuple[str, ...] | None = None
    if entrypoint_is_image and kserve.runs_huggingface_server(container, image):
        default_model = kserve.default_model_word(container, file)
        mapped = huggingface_server.engine_argv(
            words, default_model, huggingface_server.argv_word_with_text
        )
        words = mapped or []
        entrypoint = () if words else None
        notes.append(huggingface_server.IGNORED_NOTE)
    elif entrypoint_is_image:
        entrypoint = _entrypoint(image, name, [w.text for w in words], notes)
    context = ShellContext(
        file=file,
        kind="kubernetes",
        base_dir=source.base_dir,
        env=env,
        image=image,
        label=f"{file or '<input>'}: {where} container {name}",
        suppressions=suppressions,
        written=mounted_files(container, pod, source.configmaps),
    )
    found = container_invocations(words, text, context, image_entrypoint=entrypoint)
    return [msgspec.structs.replace(i, notes=i.notes + tuple(notes)) for i in found]


def _image(node: yaml.Node | None) -> str | None:
    """``image: repo:tag`` or, in Helm values, ``image: {repository, tag}``."""
    if isinstance(node, yaml.MappingNode):
        repository = yaml_tree.scalar(yaml_tree.get(node, "repository"))
        tag = yaml_tree.scalar(yaml_tree.get(node, "tag"))
        if repository is None:
            return None
        return f"{repository}:{tag}" if tag else repository
    return yaml_tree.scalar(node)


def _entrypoint(
    image: str | None, name: str, args: list[str], notes: list[str]
) -> tuple[str, ...] | None:
    """What runs when a container gives no ``command``: its image's entrypoint.

    A container with no image either (a kustomize or Helm patch that only sets
    ``args``) is taken to be vLLM's when its name says so or most of its options are
    vLLM flags: the patched base is not in the input.
    """
    if image is not None:
        return serve_entrypoint(image)
    if "vllm" in name.lower() or _mostly_vllm_flags(args):
        notes.append(
            f"container {name}: no image or command here (a patch?); its args were read as "
            "`vllm serve` arguments"
        )
        return ()
    return None


def _mostly_vllm_flags(args: list[str]) -> bool:
    options = [a.split("=", 1)[0] for a in args if a.startswith("--")]
    if not options:
        return False
    flags = known_flag_spellings()
    return sum(1 for o in options if o.replace("_", "-") in flags) * 2 > len(options)


def _env(container: yaml.Node, source: ReadSource) -> tuple[tuple[EnvAssignment, ...], list[str]]:
    """``envFrom`` ConfigMaps first, then ``env`` (which wins, as the kubelet applies it)."""
    file = source.file
    found: list[EnvAssignment] = []
    notes: list[str] = []
    name = yaml_tree.scalar(yaml_tree.get(container, "name")) or "?"
    for item in yaml_tree.sequence(yaml_tree.get(container, "envFrom")):
        cm_name = yaml_tree.scalar(yaml_tree.get_path(item, "configMapRef", "name"))
        prefix = yaml_tree.scalar(yaml_tree.get(item, "prefix")) or ""
        data = source.configmaps.get(cm_name) if cm_name is not None else None
        if data is None:
            what = f"ConfigMap {cm_name}" if cm_name else "a Secret"
            notes.append(f"container {name}: envFrom {what} is not in the input; not read")
            continue
        for key, (text, location) in data.items():
            found.append(EnvAssignment(name=prefix + key, value=text, location=location))
    for item in yaml_tree.sequence(yaml_tree.get(container, "env")):
        name_node = yaml_tree.get(item, "name")
        env_name = yaml_tree.scalar(name_node)
        if env_name is None or name_node is None:
            continue
        location = yaml_tree.location(name_node, file)
        value_node = yaml_tree.get(item, "value")
        value: str | None = yaml_tree.scalar(value_node) if value_node is not None else None
        if value_node is not None and value is None:
            value = ""  # `value:` with nothing after it is the empty string to the kubelet
        key_ref = yaml_tree.get_path(item, "valueFrom", "configMapKeyRef")
        if value_node is None and key_ref is not None:
            value = _configmap_value(key_ref, source.configmaps)
        found.append(EnvAssignment(name=env_name, value=value, location=location))
    return tuple(found), notes


def _configmap_value(ref: yaml.Node, configmaps: ConfigMaps) -> str | None:
    name = yaml_tree.scalar(yaml_tree.get(ref, "name"))
    key = yaml_tree.scalar(yaml_tree.get(ref, "key"))
    if name is None or key is None:
        return None
    entry = configmaps.get(name, {}).get(key)
    return entry[0] if entry is not None else None


def _kubeai_model(
    node: yaml.Node,
    kind: str,
    text: str,
    source: ReadSource,
    owner: str,
    suppressions: tuple[Suppression, ...],
) -> list[Invocation]:
    """KubeAI ``Model`` with ``engine: VLLM``: KubeAI runs vLLM on ``url`` with ``args``.

    Shape: kubeai-project/kubeai docs/reference/kubernetes-api.md (ModelSpec: url,
    engine, args, env). The model comes from ``url`` (``hf://org/name``).
    """
    api = yaml_tree.scalar(yaml_tree.get(node, "apiVersion")) or ""
    spec = yaml_tree.get(node, "spec")
    if kind != "Model" or not api.startswith("kubeai.org/"):
        return []
    if (yaml_tree.scalar(yaml_tree.get(spec, "engine")) or "").lower() != "vllm":
        return []
    url_node = yaml_tree.get(spec, "url")
    url = yaml_tree.scalar(url_node) or ""
    model = url.split("://", 1)[-1]
    words = [ArgvWord(model, yaml_tree.location(url_node, source.file))] if url_node else []
    words += words_from_node(yaml_tree.get(spec, "args"), text, source.file)
    env = tuple(
        EnvAssignment(
            name=key, value=yaml_tree.scalar(value), location=yaml_tree.location(node, source.file)
        )
        for key, node, value in yaml_tree.items(yaml_tree.get(spec, "env"))
    )
    context = ShellContext(
        file=source.file,
        kind="kubernetes",
        base_dir=source.base_dir,
        env=env,
        label=f"{source.file or '<input>'}: {owner} (KubeAI engine VLLM)",
        suppressions=suppressions,
    )
    return container_invocations(words, text, context, image_entrypoint=())
