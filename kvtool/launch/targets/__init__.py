"""Renderers: one module per ``--target``, each turning a LaunchPlan into files.

Every renderer returns ``{file name: text}``; the command writes them under
``--output-dir DIR`` or prints the single file to stdout (``-o FILE`` writes it there).
:data:`RENDERERS` is the one list of targets: the CLI's choices, its completion and the
recipes' ``targets`` are checked against it, so a new target is its module plus one line
here.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from kvtool.launch.plan import LaunchPlan
from kvtool.launch.targets.compose import render as render_compose
from kvtool.launch.targets.json_out import render as render_json
from kvtool.launch.targets.k8s import render as render_k8s
from kvtool.launch.targets.shell import render as render_shell

RENDERERS: dict[str, Callable[[LaunchPlan], dict[str, str]]] = {
    "shell": render_shell,
    "compose": render_compose,
    "k8s": render_k8s,
    "json": render_json,
}


TARGETS: tuple[str, ...] = tuple(RENDERERS)


def script_mode(path: Path) -> int | None:
    """The mode a written file gets: a start script is executable wherever it is written
    (``--output-dir`` or ``-o run.sh``), anything else keeps the umask's default."""
    return 0o755 if path.suffix == ".sh" else None


def render(plan: LaunchPlan, target: str) -> dict[str, str]:
    return RENDERERS[target](plan)
