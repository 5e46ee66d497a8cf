"""What a ``docker run`` (or ``podman run``) command gives its container: memory limit,
``/dev/shm`` size and the IPC namespace, read from the command's own options.

Kept apart from :mod:`.container_resources` (which reads them from YAML pod and compose
nodes), so a shell script's audit never imports PyYAML.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from kvtool.audit.inputs.command_line import ServeMatch
from kvtool.audit.inputs.quantity import parse_docker_bytes
from kvtool.audit.model import ContainerResources, Location, Quantity


def docker_run_resources(
    match: ServeMatch,
    words: Sequence[str],
    locate: Callable[[int], Location | None],
    notes: list[str],
) -> ContainerResources | None:
    """What a ``docker run`` gives its container (``words``: the command's words,
    ``locate``: a word index's location); None when the command runs no container."""
    if match.image is None:
        return None
    found: dict[str, Quantity] = {}
    host_ipc: Location | None = None
    for index, option in sorted(match.container_options.items()):
        if index >= len(words):
            continue
        word = words[index]
        value = word.removeprefix(option + "=") if word.startswith(option + "=") else word
        if option == "--ipc":
            host_ipc = locate(index) if value == "host" else None
            continue
        size = parse_docker_bytes(value)
        if size is None:
            notes.append(f"docker run {option} {value!r} is not a Docker size; not read")
            continue
        key = "shm_size" if option == "--shm-size" else "memory_limit"
        found[key] = Quantity(text=value, bytes=size, location=locate(index))
    return ContainerResources(
        memory_limit=found.get("memory_limit"), shm_size=found.get("shm_size"), host_ipc=host_ipc
    )
