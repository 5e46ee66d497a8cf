"""A container's memory, volumes and IPC namespace, for the host-memory rules.

Kubernetes:
From the container: ``resources.limits.memory`` / ``resources.requests.memory`` and its
``volumeMounts``; from its PodSpec (the mapping that holds the container list): the
``volumes`` those mounts name (an ``emptyDir``'s ``medium`` and ``sizeLimit``),
``hostIPC``, and the pod's other containers by their words (an LMCache server sidecar's
options). Shapes: https://kubernetes.io/docs/reference/kubernetes-api/workload-resources/pod-v1/
(Container resources and volumeMounts; PodSpec volumes and hostIPC).

Only a whole container (one that names its ``image``) is read: a kustomize or Helm patch
that sets only ``args`` says nothing about the volumes of the pod it patches.

``docker run`` (or podman/nerdctl): ``--shm-size``, ``--ipc host`` and ``-m``/``--memory``
(https://docs.docker.com/reference/cli/docker/container/run/).

Compose: a service's ``mem_limit`` (or ``deploy.resources.limits.memory``), ``shm_size``
and ``ipc: host`` (https://github.com/compose-spec/compose-spec/blob/master/05-services.md),
sizes in Docker's units.
"""

from __future__ import annotations

import msgspec
import yaml

from kvtool.audit.inputs import pod_holder, yaml_tree
from kvtool.audit.inputs.quantity import parse_bytes, parse_docker_bytes
from kvtool.audit.model import (
    ContainerResources,
    Invocation,
    Quantity,
    VolumeMount,
)


def attach(
    invocations: list[Invocation], container: yaml.Node, pod: yaml.Node | None, file: str | None
) -> list[Invocation]:
    """``invocations`` (all from ``container``) with the container's resources attached."""
    if not invocations or yaml_tree.get(container, "image") is None:
        return invocations
    notes: list[str] = []
    resources = read_resources(container, _pod_spec(container, pod), file, notes)
    return [
        msgspec.structs.replace(i, resources=resources, notes=i.notes + tuple(notes))
        for i in invocations
    ]


def _pod_spec(container: yaml.Node, above: yaml.Node | None) -> yaml.Node | None:
    """The mapping that holds ``container`` (its PodSpec, or KServe's predictor for
    ``predictor.model``): ``above`` itself or one of its values (the container finder
    reports the mapping one level above the container list, for its annotations)."""
    candidates = [above, *(value for _, _, value in yaml_tree.items(above))]
    for candidate in candidates:
        holds_model = yaml_tree.get(candidate, "model") is container
        if holds_model or pod_holder.holds(candidate, container):
            return candidate
    return None


def read_resources(
    container: yaml.Node, pod: yaml.Node | None, file: str | None, notes: list[str]
) -> ContainerResources:
    """The container's memory and mounts; what cannot be read is explained in ``notes``."""
    resources = yaml_tree.get(container, "resources")
    host_ipc = yaml_tree.get(pod, "hostIPC")
    host_network = yaml_tree.get(pod, "hostNetwork")
    return ContainerResources(
        memory_limit=_quantity(yaml_tree.get_path(resources, "limits", "memory"), file, notes),
        memory_request=_quantity(
            yaml_tree.get_path(resources, "requests", "memory"), file, notes
        ),
        mounts=tuple(_mounts(container, pod, file, notes)),
        host_ipc=(
            yaml_tree.location(host_ipc, file)
            if host_ipc is not None and (yaml_tree.scalar(host_ipc) or "").lower() == "true"
            else None
        ),
        host_network=(
            yaml_tree.location(host_network, file)
            if host_network is not None
            and (yaml_tree.scalar(host_network) or "").lower() == "true"
            else None
        ),
    )


def _quantity(
    node: yaml.Node | None, file: str | None, notes: list[str], *, docker: bool = False
) -> Quantity | None:
    text = yaml_tree.scalar(node)
    if node is None or text is None:
        return None
    value = parse_docker_bytes(text) if docker else parse_bytes(text)
    if value is None:
        kind = "Docker size" if docker else "Kubernetes quantity"
        notes.append(f"{yaml_tree.where(node, file)}: {text!r} is not a {kind}; not read")
        return None
    return Quantity(text=text, bytes=value, location=yaml_tree.location(node, file))


def service_resources(service: yaml.Node, file: str | None, notes: list[str]) -> ContainerResources:
    """A Compose service's memory limit, ``shm_size`` and ``ipc: host``."""
    limit = yaml_tree.get(service, "mem_limit") or yaml_tree.get_path(
        service, "deploy", "resources", "limits", "memory"
    )
    ipc = yaml_tree.get(service, "ipc")
    return ContainerResources(
        memory_limit=_quantity(limit, file, notes, docker=True),
        shm_size=_quantity(yaml_tree.get(service, "shm_size"), file, notes, docker=True),
        host_ipc=(
            yaml_tree.location(ipc, file)
            if ipc is not None and yaml_tree.scalar(ipc) == "host"
            else None
        ),
    )


def _mounts(
    container: yaml.Node, pod: yaml.Node | None, file: str | None, notes: list[str]
) -> list[VolumeMount]:
    volumes = {
        name: volume
        for volume in yaml_tree.sequence(yaml_tree.get(pod, "volumes"))
        if (name := yaml_tree.scalar(yaml_tree.get(volume, "name"))) is not None
    }
    found: list[VolumeMount] = []
    for mount in yaml_tree.sequence(yaml_tree.get(container, "volumeMounts")):
        path_node = yaml_tree.get(mount, "mountPath")
        path = yaml_tree.scalar(path_node)
        name = yaml_tree.scalar(yaml_tree.get(mount, "name"))
        if path_node is None or path is None or name is None:
            continue
        volume = volumes.get(name)
        source = _source_kind(volume)
        empty_dir = yaml_tree.get(volume, "emptyDir")
        found.append(
            VolumeMount(
                mount_path=path,
                volume=name,
                source=source,
                medium=yaml_tree.scalar(yaml_tree.get(empty_dir, "medium")) or None,
                size_limit=_quantity(yaml_tree.get(empty_dir, "sizeLimit"), file, notes),
                location=yaml_tree.location(path_node, file),
            )
        )
    return found


def _source_kind(volume: yaml.Node | None) -> str | None:
    """The volume source key (``emptyDir``, ``hostPath``, ...) of a pod volume."""
    if volume is None:
        return None
    return next((key for key, _, _ in yaml_tree.items(volume) if key != "name"), None)
