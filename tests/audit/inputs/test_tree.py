"""A repository tree with every shape plus unrelated files: directory mode = per-file mode."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvtool.audit.inputs import read_input_set
from kvtool.audit.inputs.discover import candidate_paths
from kvtool.audit.model import Invocation
from kvtool.releases import available_versions
from tests.audit.inputs import (
    test_kaito_presets,
    test_kubernetes_shapes,
    test_kustomize_json6902,
    test_reader_shapes,
    test_server_finder,
)
from tests.audit.inputs.removed_flag import GONE_AT

UNRELATED = {
    # CI pipelines, chart metadata and values of other charts, docs, code.
    ".github/workflows/ci.yaml": "on: [push]\njobs:\n  test:\n    runs-on: ubuntu-latest\n",
    "chart/Chart.yaml": "apiVersion: v2\nname: web\nversion: 0.1.0\n",
    "chart/values.yaml": "replicaCount: 1\nimage:\n  repository: nginx\n  tag: '1.27'\n",
    "chart/templates/deployment.yaml": (
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {{ .Release.Name }}\n"
        "spec:\n  template:\n    spec:\n      containers:\n"
        "        - name: web\n          image: {{ .Values.image.repository }}\n"
    ),
    "k8s/service.yaml": "apiVersion: v1\nkind: Service\nmetadata: {name: s}\nspec:\n  ports: []\n",
    "k8s/redis.yaml": (
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: r}\nspec:\n  template:\n"
        "    spec:\n      containers:\n        - {name: redis, image: 'redis:7'}\n"
    ),
    "scripts/build.sh": "#!/bin/sh\necho building; make all\n",
    "scripts/notes.sh": "# later: vllm serve m\necho nothing to serve\n",
    "mkdocs.yml": "site_name: docs\nnav: []\n",
    "data/blob.json": '{"a": 1}\n',
    "ignored/run.sh": "#!/bin/sh\nvllm serve m --calculate-kv-scales\n",
    ".gitignore": "ignored/\n",
    "README.md": "vllm serve m\n",
}


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    for shape, text in test_kubernetes_shapes.SHAPES.items():
        _write(root / "k8s" / f"{shape}.yaml", text)
    for shape, (name, text) in test_reader_shapes.SHAPES.items():
        _write(root / "deploy" / shape / name, text)
    _write(root / "k8s" / "configmap.yaml", test_kubernetes_shapes.CONFIGMAP)
    _write(root / "k8s" / "consumer.yaml", test_kubernetes_shapes.CONSUMER)
    # A preset-only KAITO Workspace and the inference ConfigMap it reads, in one file.
    _write(
        root / "kaito" / "workspace.yaml",
        test_kaito_presets.CONFIGMAP + "---\n" + test_kaito_presets.WORKSPACE,
    )
    for name, text in UNRELATED.items():
        _write(root / name, text)
    test_kustomize_json6902.write_tree(root)
    for form, (name, text) in test_server_finder.FORMS.items():
        _write(root / "forms" / form / name, text)
    _write(
        root / ".github" / "workflows" / "e2e.yml",
        test_reader_shapes.SHAPES["github-actions-run"][1],
    )
    return root


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def _key(invocation: Invocation) -> tuple[str, tuple[tuple[str, int | None], ...]]:
    return invocation.label, tuple(
        (t.text, t.location.line if t.location else None) for t in invocation.tokens
    )


def test_directory_mode_finds_what_per_file_mode_finds(tree: Path) -> None:
    walked = read_input_set([tree])
    # Each file the walk opens, audited on its own (files it never opens, README.md
    # and ignored/, are not deployment files: see the assertions below).
    candidates = [Path(p) for p in candidate_paths(tree)]
    per_file = [i for path in candidates for i in read_input_set([path]).invocations]
    assert sorted(map(_key, walked.invocations)) == sorted(map(_key, per_file))
    shapes = len(test_kubernetes_shapes.SHAPES) + len(test_reader_shapes.SHAPES)
    shapes += len(test_server_finder.FORMS)
    # + the ConfigMap consumer, the KAITO workspace, the workflow under .github, and the
    # kustomize base (its own invocation and, patched, the two overlays', which name the
    # base as their file).
    assert len({i.file for i in walked.invocations}) == shapes + 4
    (kaito,) = [i for i in walked.invocations if "KAITO" in i.label]
    assert kaito.config_items
    overlays = [i for i in walked.invocations if "kustomize overlay" in i.label]
    assert len(overlays) == 2
    assert not any("ignored" in p.parts for p in candidates)
    never_read = {Path(s.file).name for s in walked.skipped if s.never_read}
    assert "README.md" in never_read  # documentation: counted, never opened
    assert not [s for s in walked.skipped if s.problem]
    # The chart template is skipped, or (with the helm extra) rendered and then skipped:
    # its container is nginx's.
    skipped = {Path(s.file).relative_to(tree).as_posix().removesuffix("#rendered")
               for s in walked.skipped}  # fmt: skip
    assert "chart/templates/deployment.yaml" in skipped and "k8s/redis.yaml" in skipped


def test_cli_exit_code_follows_findings_never_two(tree: Path, kvtool_cli) -> None:  # type: ignore[no-untyped-def]
    result = kvtool_cli("audit", str(tree), "--vllm-version", GONE_AT, "--output-format", "json")
    assert result.exit_code == 1, result.stderr
    report = json.loads(result.stdout)
    removed = {(Path(f["location"]["file"]).name, f["location"]["line"])
               for f in report["findings"] if f["code"] == "VG002"}  # fmt: skip
    assert len(removed) >= len(test_kubernetes_shapes.SHAPES)
    assert any("chart/templates/deployment.yaml" in s["file"] for s in report["skipped"])
    clean = tree / "deploy" / "docker-run-args-only"
    versions = available_versions()
    still_there = versions[versions.index(GONE_AT) - 1]  # deprecated there: a warning
    redis = tree / "k8s" / "redis.yaml"
    ok = kvtool_cli("audit", str(clean), str(redis), "--vllm-version", still_there)
    assert ok.exit_code == 0, ok.stdout + ok.stderr


REPO = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("root", ["tree", "examples"])
def test_a_directory_finds_at_least_what_its_files_give_one_by_one(root: str, tree: Path) -> None:
    """On every fixture tree and the shipped examples: each invocation a file gives when
    named alone is in the directory's audit, or was read there as a command's --config."""
    directory = tree if root == "tree" else REPO / root
    walked = read_input_set([directory])
    keys = set(map(_key, walked.invocations))
    through_commands = {
        s.file for s in walked.skipped if s.reason == "read as the --config of a command"
    }
    alone = 0
    for path in candidate_paths(directory):
        for invocation in read_input_set([Path(path)]).invocations:
            alone += 1
            assert _key(invocation) in keys or invocation.file in through_commands, path
    assert alone > 0
