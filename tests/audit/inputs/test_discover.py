"""Directories given to ``kvtool audit``: which files are audited and which are passed over."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kvtool.audit.inputs import read_input_set, read_inputs
from kvtool.errors import KvtoolError

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = REPO / "examples"


@pytest.fixture
def repo_tree(tmp_path: Path) -> Path:
    """A repository with deploy configs, unrelated YAML, a hidden dir and a --config file."""
    deploy = tmp_path / "deploy"
    deploy.mkdir()
    for name in ("lmcache-tp4.sh", "k8s-deployment.yaml", "compose.yaml", "vllm-config.yaml"):
        shutil.copy(EXAMPLES / name, deploy / name)
    (deploy / "entrypoint").write_text("#!/bin/sh\nexec vllm serve m --port 8000\n")
    ci = tmp_path / "ci"
    ci.mkdir()
    (ci / "pipeline.yaml").write_text("jobs:\n  test:\n    runs-on: ubuntu-latest\n")
    (ci / "notes.sh").write_text("# later: vllm serve m\necho building\n")
    (ci / "blob.sh").write_bytes(b"\xff\xfe not utf-8")
    hidden = tmp_path / ".venv" / "bin"
    hidden.mkdir(parents=True)
    shutil.copy(EXAMPLES / "lmcache-tp4.sh", hidden / "serve.sh")
    return tmp_path


def test_directory_audits_serve_configurations_only(repo_tree: Path) -> None:
    files = {Path(i.file or "").relative_to(repo_tree).as_posix() for i in read_inputs([repo_tree])}
    # A --config file is one when its keys are vLLM flags (pipeline.yaml's are not).
    assert files == {
        "deploy/compose.yaml",
        "deploy/vllm-config.yaml",
        "deploy/entrypoint",
        "deploy/k8s-deployment.yaml",
        "deploy/lmcache-tp4.sh",
    }


def test_directory_order_is_stable_and_files_are_read_once(repo_tree: Path) -> None:
    script = repo_tree / "deploy" / "lmcache-tp4.sh"
    labels = [i.label for i in read_inputs([repo_tree / "deploy", script])]
    assert labels == [i.label for i in read_inputs([repo_tree / "deploy"])]
    assert sum(1 for label in labels if "lmcache-tp4.sh" in label) == 1
    alone = repo_tree / "alone"
    alone.mkdir()
    shutil.copy(script, alone / "run.sh")
    # Its only file was named on its own first: nothing is missing, nothing is doubled.
    assert len(read_inputs([alone / "run.sh", alone])) == 1


def test_a_directory_with_no_server_says_what_it_skipped(repo_tree: Path) -> None:
    found = read_input_set([repo_tree / "ci"])
    assert found.invocations == []
    reasons = {Path(s.file).name: (s.reason, s.problem) for s in found.skipped}
    assert reasons == {
        "blob.sh": ("not UTF-8 text", False),
        "notes.sh": ("no vLLM server command found (read as shell)", False),
        "pipeline.yaml": ("not a deployment file kvtool reads (no vLLM server)", False),
    }
    with pytest.raises(KvtoolError, match="no vLLM server command found"):
        read_inputs([repo_tree / "ci"])


def test_cli_audits_a_directory_and_reports_each_file(kvtool_cli, repo_tree: Path) -> None:  # type: ignore[no-untyped-def]
    result = kvtool_cli(
        "audit", str(repo_tree), "--vllm-version", "0.32.0", "--output-format", "json"
    )
    assert result.exit_code == 1  # the shipped lmcache example has a removed flag
    report = json.loads(result.stdout)
    assert len({i["file"] for i in report["invocations"]}) == 5
    assert any(f["code"] == "VG002" for f in report["findings"])
    missing = kvtool_cli("audit", str(repo_tree / "nowhere"))
    assert missing.exit_code == 2 and "no such file or directory" in missing.stderr


def test_ci_pipeline_directories_are_walked(tmp_path: Path) -> None:
    """Hidden directories of CI pipelines hold server starts (vllm-project/vllm's
    .buildkite pipelines run `vllm serve`); caches and virtualenvs are not entered."""
    pipeline = tmp_path / ".buildkite" / "serve.sh"
    pipeline.parent.mkdir()
    pipeline.write_text("#!/bin/sh\nvllm serve m --port 8000\n", encoding="utf-8")
    cached = tmp_path / ".cache" / "serve.sh"
    cached.parent.mkdir()
    cached.write_text("#!/bin/sh\nvllm serve m --port 8000\n", encoding="utf-8")
    files = {Path(i.file or "").relative_to(tmp_path).as_posix() for i in read_inputs([tmp_path])}
    assert files == {".buildkite/serve.sh"}
