"""Whether a mapping holds a given container in its ``containers``/``initContainers``.

Readers that find a container's PodSpec ask this of each container of a pod; the ids of
a mapping's containers are kept on its node, so a pod of n containers costs n, not n².
"""

from __future__ import annotations

import yaml

from kvtool.audit.inputs import yaml_tree

CONTAINER_LISTS = ("containers", "initContainers")
_HELD = "_kvtool_held_containers"


def holds(
    candidate: yaml.Node | None,
    container: yaml.Node,
    lists: tuple[str, ...] = CONTAINER_LISTS,
) -> bool:
    """Whether ``container`` is in one of ``candidate``'s ``lists`` (by default
    ``containers`` and ``initContainers``)."""
    if candidate is None:
        return False
    attribute = _HELD + "_" + "_".join(lists)
    held: frozenset[int] | None = getattr(candidate, attribute, None)
    if held is None:
        held = frozenset(
            id(item) for key in lists for item in yaml_tree.sequence(yaml_tree.get(candidate, key))
        )
        setattr(candidate, attribute, held)
    return id(container) in held
