"""Files a pod mounts from ConfigMaps, so ``--config /etc/vllm/config.yaml`` reads the
ConfigMap it names when that ConfigMap is in the input set.

Kubernetes writes each data key of a ``configMap`` volume as a file under the mount
path (only the listed keys, at their ``path``, when the volume gives ``items``); a mount
with ``subPath`` is that one file
(https://kubernetes.io/docs/concepts/storage/volumes/#configmap). The text is read from
the ConfigMap, at the lines where it is written.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable

import yaml

from kvtool.audit.inputs import pod_holder, yaml_tree
from kvtool.audit.inputs.source import ConfigMaps
from kvtool.audit.inputs.vllm_config import WrittenFile


def mounted_files(
    container: yaml.Node, above: yaml.Node | None, configmaps: ConfigMaps
) -> dict[str, WrittenFile]:
    """Path in the container -> the ConfigMap text mounted there (ConfigMaps of the input)."""
    pod = _pod_holding(container, above)
    volumes = {
        name: volume
        for volume in yaml_tree.sequence(yaml_tree.get(pod, "volumes"))
        if (name := yaml_tree.scalar(yaml_tree.get(volume, "name"))) is not None
    }
    found: dict[str, WrittenFile] = {}
    for mount in yaml_tree.sequence(yaml_tree.get(container, "volumeMounts")):
        mount_path = yaml_tree.scalar(yaml_tree.get(mount, "mountPath"))
        volume = volumes.get(yaml_tree.scalar(yaml_tree.get(mount, "name")) or "")
        source = yaml_tree.get(volume, "configMap")
        data = configmaps.get(yaml_tree.scalar(yaml_tree.get(source, "name")) or "")
        if mount_path is None or source is None or data is None:
            continue
        files = _files(source, data.keys())
        sub_path = yaml_tree.scalar(yaml_tree.get(mount, "subPath"))
        for relative, key in files.items():
            if key not in data or not _plain_relative(relative):
                continue  # Kubernetes refuses the pod (or mounts nothing there)
            if sub_path is not None and relative != sub_path:
                continue
            path = mount_path if sub_path is not None else posixpath.join(mount_path, relative)
            value, location = data[key]
            if location is None or location.line is None:
                continue
            # a block scalar (`key: |`) starts on the line after its key
            first_line = location.line + 1 if "\n" in value else location.line
            found[posixpath.normpath(path)] = WrittenFile(value, location.file, first_line)
    return found


def _plain_relative(path: str) -> bool:
    """A ``path`` Kubernetes accepts for a projected key: relative, no ``..`` element."""
    return bool(path) and not path.startswith("/") and ".." not in path.split("/")


def _files(source: yaml.Node, keys: Iterable[str]) -> dict[str, str]:
    """Relative file name -> data key, as the volume's ``items`` (or every key) lays them out."""
    items = yaml_tree.sequence(yaml_tree.get(source, "items"))
    if not items:
        return {key: key for key in keys}
    laid_out: dict[str, str] = {}
    for item in items:
        key = yaml_tree.scalar(yaml_tree.get(item, "key"))
        path = yaml_tree.scalar(yaml_tree.get(item, "path"))
        if key is not None:
            laid_out[path or key] = key
    return laid_out


def _pod_holding(container: yaml.Node, above: yaml.Node | None) -> yaml.Node | None:
    """The PodSpec whose container list holds ``container``: ``above`` or one of its values."""
    for candidate in (above, *(value for _, _, value in yaml_tree.items(above))):
        if pod_holder.holds(candidate, container):
            return candidate
    return None
