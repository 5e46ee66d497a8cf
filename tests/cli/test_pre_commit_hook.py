"""The pre-commit hook (.pre-commit-hooks.yaml) through the real ``pre-commit`` package:
a scratch repository uses this checkout as its hook repository; a staged serve script
with a removed flag fails the commit, the same script fixed passes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.network  # pre-commit pip-installs the hook from the package index

# What a pip install of the hook repository needs; tests and scripts stay behind.
HOOK_REPO_PARTS = ("pyproject.toml", "README.md", "LICENSE", ".pre-commit-hooks.yaml",
                   "kvtool", "rules", "recipes", "docs")
# A fixed identity and date give the same commit for the same files, so pre-commit's
# cached hook environment is reused while kvtool does not change.
FIXED_COMMIT_ENV = {
    "GIT_AUTHOR_NAME": "kvtool", "GIT_AUTHOR_EMAIL": "kvtool@invalid",
    "GIT_COMMITTER_NAME": "kvtool", "GIT_COMMITTER_EMAIL": "kvtool@invalid",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z",
}
SERVE = "#!/bin/sh\nvllm serve meta-llama/Llama-3.1-8B-Instruct --port 8000{extra}\n"


def _git(cwd: Path, *args: str) -> str:
    env = {**os.environ, **FIXED_COMMIT_ENV}
    done = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          check=True)
    return done.stdout.strip()


def _hook_repository(target: Path) -> str:
    """A git repository holding this checkout's package and hook files; its commit."""
    target.mkdir()
    for part in HOOK_REPO_PARTS:
        source = REPO_ROOT / part
        if source.is_dir():
            shutil.copytree(source, target / part, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, target / part)
    _git(target, "init", "-q")
    _git(target, "add", "-A")
    _git(target, "commit", "-q", "-m", "kvtool hook")
    return _git(target, "rev-parse", "HEAD")


def _pre_commit(project: Path) -> subprocess.CompletedProcess[str]:
    pre_commit = Path(sys.executable).with_name("pre-commit")
    if not pre_commit.exists():
        pytest.skip("the pre-commit package is not installed (pip install -e '.[test]')")
    home = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "kvtool" / "pre-commit"
    env = {**os.environ, "PRE_COMMIT_HOME": str(home)}
    return subprocess.run([str(pre_commit), "run", "--all-files"], cwd=project, env=env,
                          capture_output=True, text=True, timeout=600, check=False)


def test_hook_fails_on_findings_and_passes_when_fixed(tmp_path: Path) -> None:
    rev = _hook_repository(tmp_path / "hook")
    project = tmp_path / "project"
    project.mkdir()
    _git(project, "init", "-q")
    (project / ".pre-commit-config.yaml").write_text(
        f"repos:\n  - repo: {tmp_path / 'hook'}\n    rev: {rev}\n    hooks:\n"
        "      - id: kvtool-audit\n        args: [--vllm-version, '0.32.0']\n"
    )
    serve = project / "serve.sh"
    serve.write_text(SERVE.format(extra=" --calculate-kv-scales"))
    _git(project, "add", "-A")
    failed = _pre_commit(project)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "serve.sh:2:" in failed.stdout and "VG002" in failed.stdout
    assert ".pre-commit-config.yaml" not in failed.stdout.replace("[INFO]", "")
    serve.write_text(SERVE.format(extra=""))
    _git(project, "add", "-A")
    passed = _pre_commit(project)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert "kvtool audit" in passed.stdout and "Passed" in passed.stdout
