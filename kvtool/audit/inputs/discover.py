"""The files of a directory given to ``kvtool audit``, in a stable order.

A directory is walked in name order and every file is given to the same code that
reads a file named on the command line (:func:`kvtool.audit.inputs.read_input_set`),
which decides what each is; nothing is passed over here by its name, so a directory
finds at least what its files give one by one. Hidden directories (but those of CI
pipelines and dev containers, ``_HIDDEN_READ``), dependency trees and whatever a
``.gitignore`` on the way down ignores are not entered.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pathspec

_Ignores = list[tuple[str, "pathspec.GitIgnoreSpec"]]  # (directory, its .gitignore)
_SKIPPED_DIRS = frozenset({"node_modules", "__pycache__", "site-packages", "venv"})
# Hidden directories that hold deployment files: CI pipelines that start vLLM (GitHub,
# GitLab, CircleCI, Buildkite: vllm-project/vllm's own .buildkite pipelines run
# `vllm serve`), dev containers, dstack configurations, VS Code's launch.json and
# tasks.json (a debug or task configuration that runs vLLM's server). Other hidden
# directories (.git, .venv, caches) are not entered.
_HIDDEN_READ = frozenset(
    {".github", ".gitlab", ".circleci", ".buildkite", ".devcontainer", ".dstack", ".vscode"}
)
_GITIGNORE = ".gitignore"


def candidate_paths(directory: Path) -> Iterator[str]:
    """Every file under ``directory`` the walk enters, as strings (a walk of many files
    skips building Paths)."""
    ignores: _Ignores = []
    for root, dirs, files in os.walk(directory):
        ignores = [(base, spec) for base, spec in ignores if _within(root, base)]
        if _GITIGNORE in files:
            spec = _gitignore(os.path.join(root, _GITIGNORE))
            if spec is not None:
                ignores.append((root, spec))
        dirs[:] = sorted(
            d
            for d in dirs
            if (not d.startswith(".") or d in _HIDDEN_READ)
            and d not in _SKIPPED_DIRS
            and not _ignored(root, d, ignores, is_dir=True)
        )
        for name in sorted(files):
            if not _ignored(root, name, ignores, is_dir=False):
                yield os.path.join(root, name)


def _within(root: str, base: str) -> bool:
    return root == base or root.startswith(base + os.sep)


def _gitignore(path: str) -> pathspec.GitIgnoreSpec | None:
    """A ``.gitignore`` read like any input: a regular file within the size limit (a FIFO
    would hang the walk, a link to /dev/zero fill memory) and with at most
    ``gitignore_patterns`` patterns (every file of the walk is matched against each)."""
    import pathspec

    from kvtool import limits
    from kvtool.fsio import read_input_bytes

    if not os.path.exists(path):
        return None  # a dangling link: nothing is ignored, as git does
    lines = read_input_bytes(path).decode("utf-8", errors="replace").splitlines()
    patterns = sum(1 for line in lines if line.strip() and not line.lstrip().startswith("#"))
    limits.GITIGNORE_PATTERNS.check(patterns, path)
    return pathspec.GitIgnoreSpec.from_lines(lines)


def _ignored(root: str, name: str, ignores: _Ignores, *, is_dir: bool) -> bool:
    if not ignores:
        return False
    path = os.path.join(root, name)
    for base, spec in ignores:
        relative = os.path.relpath(path, base).replace(os.sep, "/") + ("/" if is_dir else "")
        if spec.match_file(relative):
            return True
    return False
