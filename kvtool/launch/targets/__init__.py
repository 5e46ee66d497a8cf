"""Renderers: one module per ``--target``, each turning a LaunchPlan into files.

Every renderer returns ``{file name: text}``; the command writes them under ``-o DIR``
or prints the single file to stdout.
"""

from __future__ import annotations

from collections.abc import Callable

from kvtool.launch.plan import LaunchPlan
from kvtool.launch.recipe import Target
from kvtool.launch.targets.compose import render as render_compose
from kvtool.launch.targets.json_out import render as render_json
from kvtool.launch.targets.k8s import render as render_k8s
from kvtool.launch.targets.shell import render as render_shell

RENDERERS: dict[Target, Callable[[LaunchPlan], dict[str, str]]] = {
    "shell": render_shell,
    "compose": render_compose,
    "k8s": render_k8s,
    "json": render_json,
}


def render(plan: LaunchPlan, target: Target) -> dict[str, str]:
    return RENDERERS[target](plan)
