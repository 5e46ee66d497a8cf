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
    )


def siblings(
    containers: Sequence[yaml.Node], text: str, file: str | None
) -> dict[int, tuple[PodContainer, ...]]:
    """For each container of one pod (by ``id``), every other container of that pod."""
    described = [(id(node), describe(node, text, file)) for node in containers]
    return {
        key: tuple(record for other, record in described if other != key) for key, _ in described
    }
