"""Renderers: one module per ``--target``, each turning a LaunchPlan into files.

Every renderer returns ``{file name: text}``; the command writes them under ``-o DIR``
or prints the single file to stdout.
"""

from __future__ import annotations

from collections.abc import Callable

from kvtool.launch.plan import LaunchPlan
from kvtool.launch.recipe import Target
from kvtool.launch.targets import compose, json_out, k8s, shell

RENDERERS: dict[Target, Callable[[LaunchPlan], dict[str, str]]] = {
    "shell": shell.render,
    "compose": compose.render,
    "k8s": k8s.render,
    "json": json_out.render,
}


def render(plan: LaunchPlan, target: Target) -> dict[str, str]:
    return RENDERERS[target](plan)
