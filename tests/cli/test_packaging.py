"""The package as users install it: metadata, what the wheel ships, and a torch-free
install that runs the main commands."""

from __future__ import annotations

import subprocess
import sys
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest

from kvtool.project import REPOSITORY_URL
from tests.conftest import REPO_ROOT

PYPROJECT = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def test_project_urls_and_license_agree_with_the_code() -> None:
    project = PYPROJECT["project"]
    assert project["urls"]["Repository"] == REPOSITORY_URL
    assert all(url.startswith(REPOSITORY_URL) for url in project["urls"].values())
    assert project["license"]["text"] == "Apache-2.0"
    assert "Apache License" in (REPO_ROOT / "LICENSE").read_text(encoding="utf-8")[:200]
    assert "License :: OSI Approved :: Apache Software License" in project["classifiers"]
    assert (REPO_ROOT / "kvtool" / "py.typed").exists()
    assert (REPO_ROOT / "CHANGELOG.md").read_text(encoding="utf-8").startswith("# Changelog")


def test_base_dependencies_leave_torch_to_the_connector_extra() -> None:
    base = " ".join(PYPROJECT["project"]["dependencies"]).lower()
    assert "torch" not in base and "numpy" not in base
    assert any(d.startswith("torch") for d in PYPROJECT["project"]["optional-dependencies"]
               ["connector"])


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out),
                    str(REPO_ROOT)], check=True, capture_output=True, timeout=300)
    return next(out.glob("kvtool-*.whl"))


@pytest.mark.network
def test_wheel_ships_rule_docs_schemas_types_and_license(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "kvtool/py.typed" in names
    assert "kvtool/_data/docs/rules.md" in names
    schemas = {n for n in names if n.startswith("kvtool/_data/docs/schemas/")}
    assert len(schemas) == len(list((REPO_ROOT / "docs" / "schemas").glob("*.json")))
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)


@pytest.mark.network
def test_a_plain_install_runs_the_main_commands_without_torch(
    wheel: Path, tmp_path: Path
) -> None:
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                    str(wheel)], check=True, capture_output=True, timeout=600)
    no_torch = subprocess.run([str(python), "-c", "import torch"], capture_output=True)
    assert no_torch.returncode != 0, "a plain install pulled in torch"
    kvtool = env_dir / "bin" / "kvtool"
    serve = tmp_path / "serve.sh"
    serve.write_text("#!/bin/sh\nvllm serve m --calculate-kv-scales\n")
    runs = {
        "audit": ["audit", str(serve), "--vllm-version", "0.32.0"],
        "size": ["size", "--model", "llama-3.1-8b", "--sessions", "4"],
        "launch": ["launch", "native-cpu-offload", "--model", "meta-llama/Llama-3.1-8B-Instruct",
                   "--host-ram-gib", "64", "--vllm-version", "0.32.0"],
        "rule": ["rule", "CN010"],
        "inspect-image": ["inspect-image", "--help"],
    }
    for name, args in runs.items():
        done = subprocess.run([str(kvtool), *args], capture_output=True, text=True,
                              cwd=tmp_path, timeout=120)
        assert done.returncode in (0, 1), (name, done.stderr)
        assert done.stdout.strip(), name
    assert "docs/rules.md#vg002" in subprocess.run(
        [str(kvtool), "audit", str(serve), "--vllm-version", "0.32.0", "--output-format",
         "json"], capture_output=True, text=True, cwd=tmp_path, timeout=120).stdout
