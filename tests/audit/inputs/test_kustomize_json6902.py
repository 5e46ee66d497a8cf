"""Kustomize JSON 6902 patches applied to the base they target: a removed flag the
patch adds is found in the patch, at its line; the base's words stay in the base.

Shapes as kubernetes-sigs/kustomize examples/jsonpatch.md and
https://kubectl.docs.kubernetes.io/references/kustomize/kustomization/patches/ write
them: an overlay's kustomization.yaml naming ``../base`` under ``resources``, with an
inline ``patch: |-`` of ``- op: add`` items or a patch file under ``patchesJson6902``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kvtool.audit.inputs import read_input_set
from tests.audit.inputs.removed_flag import REMOVED, line_of, removed_at

F = REMOVED

BASE = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: vllm
spec:
  template:
    spec:
      containers:
        - name: vllm
          image: vllm/vllm-openai:v0.20.0
          args: ["m", "--max-model-len", "4096"]
"""
BASE_KUSTOMIZATION = "resources:\n  - deployment.yaml\n"
INLINE_OVERLAY = f"""\
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - ../base
patches:
  - target:
      kind: Deployment
      name: vllm
    patch: |-
      - op: add
        path: /spec/template/spec/containers/0/args/-
        value: {F}
"""
FILE_OVERLAY = """\
resources:
  - ../base
patchesJson6902:
  - target: {group: apps, version: v1, kind: Deployment, name: vllm}
    path: args-patch.yaml
"""
PATCH_FILE = f"""\
- op: replace
  path: /spec/template/spec/containers/0/args
  value:
    - m
    - --max-model-len
    - "8192"
    - {F}
- op: add
  path: /spec/template/spec/containers/0/env
  value:
    - name: PYTHONHASHSEED
      value: "0"
"""

TREE = {
    "kustomize/base/deployment.yaml": BASE,
    "kustomize/base/kustomization.yaml": BASE_KUSTOMIZATION,
    "kustomize/inline/kustomization.yaml": INLINE_OVERLAY,
    "kustomize/file/kustomization.yaml": FILE_OVERLAY,
    "kustomize/file/args-patch.yaml": PATCH_FILE,
}


def write_tree(root: Path) -> None:
    for name, text in TREE.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    write_tree(tmp_path)
    return tmp_path / "kustomize"


def test_inline_patch_adds_a_flag_found_in_the_kustomization(tree: Path) -> None:
    found = read_input_set([tree / "inline" / "kustomization.yaml"])
    (invocation,) = found.invocations
    words = [(t.text, Path(t.location.file or "").parent.name, t.location.line)
             for t in invocation.tokens if t.location]  # fmt: skip
    assert words == [
        ("m", "base", 11), ("--max-model-len", "base", 11), ("4096", "base", 11),
        (F, "inline", line_of(INLINE_OVERLAY, F)),
    ]  # fmt: skip
    assert "kustomize overlay" in invocation.label
    assert removed_at(found) == [("kustomization.yaml", line_of(INLINE_OVERLAY, F))]


def test_patch_file_replaces_args_and_adds_env(tree: Path) -> None:
    found = read_input_set([tree / "file" / "kustomization.yaml"])
    (invocation,) = found.invocations
    assert [t.text for t in invocation.tokens] == ["m", "--max-model-len", "8192", F]
    assert removed_at(found) == [("args-patch.yaml", line_of(PATCH_FILE, F))]
    (env,) = invocation.env
    assert env.name == "PYTHONHASHSEED" and env.location is not None
    assert Path(env.location.file or "").name == "args-patch.yaml"


def test_a_patch_whose_target_is_missing_changes_nothing(tree: Path) -> None:
    other = INLINE_OVERLAY.replace("name: vllm", "name: other")
    (tree / "inline" / "kustomization.yaml").write_text(other)
    found = read_input_set([tree / "inline" / "kustomization.yaml"])
    assert found.invocations == []
    assert not [s for s in found.skipped if s.problem]
