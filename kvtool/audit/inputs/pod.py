"""The containers of one pod as plain records, so rules can see what runs next to vLLM.

A routing sidecar or a cache server is no ``vllm serve`` command and yields no
invocation; each invocation of the pod carries its siblings instead.
"""

from __future__ import annotations

from collections.abc import Sequence

import yaml

from kvtool.audit.inputs import yaml_tree
from kvtool.audit.inputs.container import words_from_node
from kvtool.audit.model import PodContainer, SourceToken


def describe(container: yaml.Node, text: str, file: str | None) -> PodContainer:
    """One container mapping: its name, image and argv words as written."""
    words = words_from_node(yaml_tree.get(container, "command"), text, file)
    words += words_from_node(yaml_tree.get(container, "args"), text, file)
    image = yaml_tree.get(container, "image")
    return PodContainer(
        name=yaml_tree.scalar(yaml_tree.get(container, "name")) or "?",
        image=yaml_tree.scalar(image) if isinstance(image, yaml.ScalarNode) else None,
        argv=tuple(SourceToken(text=w.text, location=w.location) for w in words),
        location=yaml_tree.location(container, file),
        gpus=_gpus(container),
        ports=_container_ports(container),
    )


def _container_ports(container: yaml.Node) -> tuple[int, ...]:
    numbers = (
        yaml_tree.scalar(yaml_tree.get(entry, "containerPort"))
        for entry in yaml_tree.sequence(yaml_tree.get(container, "ports"))
    )
    return tuple(int(n) for n in numbers if n is not None and n.strip().isdigit())


# Device plugins name GPUs `<vendor>/gpu` (nvidia.com/gpu, amd.com/gpu); the NVIDIA
# container runtime also exposes the GPUs NVIDIA_VISIBLE_DEVICES names ("void": none).
_HIDDEN_DEVICES = frozenset({"", "void", "none"})


def _gpus(container: yaml.Node) -> bool | None:
    resources = yaml_tree.get(container, "resources")
    for section in ("limits", "requests"):
        for name, _, value in yaml_tree.items(yaml_tree.get(resources, section)):
            count = yaml_tree.scalar(value)
            if name.endswith("/gpu") and count is not None and count.strip() not in ("0", ""):
                return True
    for entry in yaml_tree.sequence(yaml_tree.get(container, "env")):
        if yaml_tree.scalar(yaml_tree.get(entry, "name")) == "NVIDIA_VISIBLE_DEVICES":
            shown = (yaml_tree.scalar(yaml_tree.get(entry, "value")) or "").strip().lower()
            return shown not in _HIDDEN_DEVICES
    if yaml_tree.sequence(yaml_tree.get(resources, "claims")):
        return None  # a DRA ResourceClaim: whether it holds a GPU is the claim's business
    return False


def siblings(
    containers: Sequence[yaml.Node], text: str, file: str | None
) -> dict[int, tuple[PodContainer, ...]]:
    """For each container of one pod (by ``id``), every other container of that pod."""
    described = [(id(node), describe(node, text, file)) for node in containers]
    return {
        key: tuple(record for other, record in described if other != key) for key, _ in described
    }
