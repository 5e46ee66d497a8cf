"""Find the files a directory given to ``kvtool audit`` may declare a server in.

A directory is walked in name order. Candidates are the names some reader of the
registry looks at (:func:`kvtool.audit.inputs.registry.is_candidate`) and files without
a suffix that start with a shebang. Hidden directories (but ``.github``, for its
workflows), dependency trees and whatever a ``.gitignore`` on the way down ignores
are not entered. Every candidate is parsed:
none is passed over for not mentioning ``vllm serve``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from kvtool import limits
from kvtool.audit.inputs.registry import is_candidate
from kvtool.audit.lmcache_release import is_requirements_name
from kvtool.fsio import read_input_bytes

if TYPE_CHECKING:
    import pathspec

_Ignores = list[tuple[str, "pathspec.GitIgnoreSpec"]]  # (directory, its .gitignore)
_SKIPPED_DIRS = frozenset({"node_modules", "__pycache__", "site-packages", "venv"})
# Hidden directories that hold deployment files: CI workflows that start vLLM.
_HIDDEN_READ = frozenset({".github"})
_GITIGNORE = ".gitignore"


def candidate_files(directory: Path) -> Iterator[Path]:
    """Files under ``directory`` that may hold a serve configuration, in a stable order."""
    return (Path(path) for path in candidate_paths(directory))


def candidate_paths(directory: Path) -> Iterator[str]:
    """:func:`candidate_files` as strings (a walk of many files skips building Paths)."""
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
            # requirements*.txt: not a deployment, but it may pin the LMCache release.
            wanted = is_candidate(name) or (
                name.lower().endswith(".txt") and is_requirements_name(os.path.join(root, name))
            )
            if not wanted and "." in name:
                continue  # most files of a repository: no path to build
            path = os.path.join(root, name)
            if (wanted or _has_shebang(path)) and not _ignored(root, name, ignores, is_dir=False):
                yield path


def _within(root: str, base: str) -> bool:
    return root == base or root.startswith(base + os.sep)


def _gitignore(path: str) -> pathspec.GitIgnoreSpec | None:
    """A ``.gitignore`` read like any input: a regular file within the size limit (a FIFO
    would hang the walk, a link to /dev/zero fill memory) and with at most
    ``gitignore_patterns`` patterns (every file of the walk is matched against each)."""
    import pathspec

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


def _has_shebang(path: str) -> bool:
    try:
        with open(path, "rb") as handle:
            return handle.read(2) == b"#!"
    except OSError:
        return False
