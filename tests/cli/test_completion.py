"""Shell completion offers the values kvtool knows, read from their registries."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from kvtool.audit import rules as _rules  # noqa: F401  (registers every rule)
from kvtool.audit.registry import registry
from kvtool.launch.recipe import load_recipes
from kvtool.launch.targets import RENDERERS
from kvtool.models.catalog import catalog
from kvtool.releases import available_versions
from tests.conftest import REPO_ROOT


def complete(words: str) -> list[str]:
    """What bash completion offers for the last word of ``words`` (typer's protocol)."""
    env = {**os.environ, "_KVTOOL_COMPLETE": "complete_bash", "COMP_WORDS": words,
           "COMP_CWORD": str(len(words.split(" ")) - 1)}  # a trailing space: a new word
    done = subprocess.run([sys.executable, "-c", "from kvtool.cli import main; main()"],
                          env=env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    return done.stdout.split()


def test_rule_codes_and_names() -> None:
    assert complete("kvtool rule CN01") == sorted(r.code for r in registry
                                                   if r.code.startswith("CN01"))
    assert set(complete("kvtool audit --select redundant")) == {
        r.name for r in registry if r.name.startswith("redundant")}


def test_recipe_names_models_versions_and_targets() -> None:
    assert set(complete("kvtool launch native")) == {
        r.name for r in load_recipes() if r.name.startswith("native")}
    assert set(complete("kvtool size --model llama")) == {
        e.name for e in catalog() if e.name.startswith("llama")}
    newest = available_versions()[-1]
    offered = complete(f"kvtool audit --vllm-version {newest[:3]}")
    assert offered[0] == newest and set(offered) <= set(available_versions())
    assert complete("kvtool launch x --target ") == list(RENDERERS)


@pytest.mark.parametrize("mode", ["auto", "always", "never"])
def test_color_modes(mode: str) -> None:
    assert complete(f"kvtool size --color {mode[:2]}") == [mode]
