"""Renderers: one module per ``--target``, each turning a LaunchPlan into files.

Every renderer returns ``{file name: text}``; the command writes them under
``--output-dir DIR`` or prints the single file to stdout (``-o FILE`` writes it there).
:data:`RENDERERS` is the one list of targets: the CLI's choices, its completion and the
recipes' ``targets`` are checked against it, so a new target is its module plus one line
here. A renderer's module is imported when its target is rendered.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module
from pathlib import Path

from kvtool.launch.plan import LaunchPlan

# --target value -> the module of this package holding its ``render(plan)``.
RENDERERS: dict[str, str] = {
    "shell": "shell",
    "compose": "compose",
    "k8s": "k8s",
    "json": "json_out",
}


TARGETS: tuple[str, ...] = tuple(RENDERERS)


def script_mode(path: Path) -> int | None:
    """The mode a written file gets: a start script is executable wherever it is written
    (``--output-dir`` or ``-o run.sh``), anything else keeps the umask's default."""
    return 0o755 if path.suffix == ".sh" else None


def render(plan: LaunchPlan, target: str) -> dict[str, str]:
    renderer: Callable[[LaunchPlan], dict[str, str]] = import_module(
        f"{__name__}.{RENDERERS[target]}"
    ).render
    return renderer(plan)
