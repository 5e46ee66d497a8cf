"""Hostile inputs for the readers of kustomize JSON 6902 patches, ConfigMap mounts,
container memory quantities and KAITO presets: nothing read from outside what the user
named, no traceback, no hang, no graph where a tree belongs.

Shapes as the reader tests write them (kubernetes-sigs/kustomize examples/jsonpatch.md
overlays; Kubernetes Pod/ConfigMap objects; kaito-project/kaito v1beta1 Workspaces).
"""

from __future__ import annotations

import contextlib
import functools
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from kvtool.audit.inputs import NoServerCommand, json_patch, read_input_set, read_text, yaml_tree
from kvtool.audit.inputs.quantity import parse_bytes, parse_docker_bytes
from kvtool.audit.lmcache_release import pins_in_text
from kvtool.audit.model import Invocation
from kvtool.errors import KvtoolError
from kvtool.limits import LimitExceeded

DEPLOYMENT = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: vllm}
spec:
  template:
    spec:
      containers:
        - name: vllm
          image: vllm/vllm-openai:v0.20.0
          args: ["m", "--max-model-len", "4096"]
"""
ADD_ARG = """\
patches:
  - target: {kind: Deployment, name: vllm}
    patch: |-
      - op: add
        path: /spec/template/spec/containers/0/args/-
        value: --enforce-eager
"""


def _overlay(tmp_path: Path, resources: list[str], patches: str = ADD_ARG) -> Path:
    """base/ (a Deployment) and overlay/kustomization.yaml naming ``resources``."""
    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "deployment.yaml").write_text(DEPLOYMENT)
    (tmp_path / "base" / "kustomization.yaml").write_text("resources: [deployment.yaml]\n")
    (tmp_path / "overlay").mkdir()
    listed = "".join(f"  - {name!r}\n" for name in resources)
    kustomization = tmp_path / "overlay" / "kustomization.yaml"
    kustomization.write_text(f"resources:\n{listed}{patches}")
    return kustomization


def _patched(path: Path) -> list[Invocation]:
    found = read_input_set([path])
    assert not [s for s in found.skipped if s.problem], found.skipped
    return found.invocations


def test_resources_outside_the_kustomization_are_not_read(tmp_path: Path) -> None:
    secret = tmp_path / "secret.yaml"
    secret.write_text(DEPLOYMENT.replace("vllm/vllm-openai", "leaked/image"))
    outside = os.path.relpath(secret, tmp_path / "overlay")
    kustomization = _overlay(tmp_path, ["../base", outside, str(secret), "../base/deployment.yaml"])
    (invocation,) = _patched(kustomization)
    assert "--enforce-eager" in [t.text for t in invocation.tokens]
    assert invocation.image is not None and "leaked" not in invocation.image
    outside_notes = [n for n in invocation.notes if "outside" in n and "load restrictor" in n]
    assert len(outside_notes) == 3, invocation.notes


def test_a_patch_file_outside_the_kustomization_is_not_read(tmp_path: Path) -> None:
    patch = tmp_path / "patch.yaml"
    patch.write_text("- op: add\n  path: /spec/template/spec/containers/0/args/-\n  value: x\n")
    patches = f"patchesJson6902:\n  - target: {{kind: Deployment}}\n    path: {patch}\n"
    kustomization = _overlay(tmp_path, ["../base"], patches)
    with pytest.raises(NoServerCommand):
        read_text(
            kustomization.read_text(),
            str(kustomization),
            input_format="kubernetes",
            base_dir=kustomization.parent,
        )


def test_self_references_and_repeats_are_read_once(tmp_path: Path) -> None:
    """``resources: [., ., ...]`` at every level would be read 20**8 times; a cycle
    through another directory ends too."""
    kustomization = _overlay(tmp_path, ["../base", *["."] * 20, "../loop", "../base"])
    loop = tmp_path / "loop"
    loop.mkdir()
    (loop / "kustomization.yaml").write_text("resources: [../overlay, ../loop, .]\n")
    started = time.process_time()
    (invocation,) = _patched(kustomization)
    assert time.process_time() - started < 5
    assert [t.text for t in invocation.tokens].count("--enforce-eager") == 1
    assert any("read already" in note for note in invocation.notes)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_fifos_symlink_loops_directories_and_missing_files_are_notes(tmp_path: Path) -> None:
    kustomization = _overlay(
        tmp_path, ["../base", "fifo", "loop", "missing.yaml", "empty", "/dev/zero"]
    )
    overlay = kustomization.parent
    os.mkfifo(overlay / "fifo")
    (overlay / "loop").symlink_to("loop")
    (overlay / "empty").mkdir()
    started = time.monotonic()
    (invocation,) = _patched(kustomization)
    assert time.monotonic() - started < 5
    notes = "\n".join(invocation.notes)
    for name in ("fifo", "loop", "missing.yaml", "empty", "/dev/zero"):
        assert name in notes, notes


def _sizes(node: yaml.Node, cap: int) -> int:
    """Nodes reached from ``node`` following every path, up to ``cap`` (a tree's size)."""
    count, stack = 0, [node]
    while stack and count < cap:
        current = stack.pop()
        count += 1
        if isinstance(current, yaml.MappingNode):
            stack.extend(v for _, v in current.value)
        elif isinstance(current, yaml.SequenceNode):
            stack.extend(current.value)
    return count


def _operations(text: str) -> list[json_patch.Operation]:
    found = json_patch.operations(yaml_tree.compose_documents(text, "patch.yaml")[0])
    assert found is not None
    return found


def test_a_patch_cannot_add_a_value_inside_itself() -> None:
    (target,) = yaml_tree.compose_documents("spec: {}\n", "base.yaml")
    patch = (
        "- {op: add, path: /spec/a, value: &v {k: 1}}\n- {op: add, path: /spec/a/self, value: *v}\n"
    )
    for operation in _operations(patch):
        assert json_patch.apply(target, operation) is None
    assert _sizes(target, 1000) < 20  # a cycle would reach the cap


def test_shared_values_do_not_double_with_each_operation() -> None:
    """Each level adds one node twice (an alias): shared, 40 levels are 2**40 paths."""
    (target,) = yaml_tree.compose_documents("spec: {}\n", "base.yaml")
    lines, path = [], "/spec"
    for level in range(40):
        lines.append(f"- {{op: add, path: {path}/l, value: &n{level} {{}}}}")
        lines.append(f"- {{op: add, path: {path}/r, value: *n{level}}}")
        path += "/l"
    budget = json_patch.CopyBudget("patch.yaml")
    for operation in _operations("\n".join(lines) + "\n"):
        json_patch.apply(target, operation, budget)
    assert _sizes(target, 10_000) < 200


def test_copies_stop_at_the_node_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """The patch reads within the limit; applied to many targets, its copies do not."""
    (target,) = yaml_tree.compose_documents("spec: {}\n", "base.yaml")
    big = "[" + ", ".join(["1"] * 40) + "]"
    (operation,) = _operations(f"- {{op: add, path: /spec/a, value: {big}}}\n")
    monkeypatch.setenv("KVTOOL_LIMIT_YAML_NODES", "100")
    budget = json_patch.CopyBudget("patch.yaml")
    json_patch.apply(target, operation, budget)
    json_patch.apply(target, operation, budget)
    with pytest.raises(LimitExceeded, match="yaml_nodes"):
        json_patch.apply(target, operation, budget)


@pytest.mark.parametrize(
    "path",
    [
        "/spec/list/²/x",
        "/spec/list/" + "9" * 5000 + "/x",
        "/spec/list/999999999/args/-",
        "/spec/list/²",
        "/spec/list/" + "9" * 5000,
        "/spec/list/-1",
        "/spec/~1~0/x",
    ],
)
def test_odd_indexes_are_reasons_not_errors(path: str) -> None:
    (target,) = yaml_tree.compose_documents("spec: {list: [a, b]}\n", "base.yaml")
    (operation,) = _operations(f"- op: add\n  path: '{path}'\n  value: x\n")
    assert json_patch.apply(target, operation) is not None


CONFIGMAP_POD = """\
apiVersion: v1
kind: ConfigMap
metadata: {name: cfg}
data:
  config.yaml: |
    max-model-len: 4096
---
apiVersion: v1
kind: Pod
metadata: {name: p}
spec:
  containers:
    - name: vllm
      image: vllm/vllm-openai:v0.20.0
      args: [--model, m, --config, /etc/vllm/config.yaml]
      volumeMounts: [{name: c, mountPath: /etc/vllm MOUNT}]
  volumes: [{name: c, configMap: {name: cfg, items: ITEMS}}]
"""


@pytest.mark.parametrize(
    ("mount", "items"),
    [
        ("", "[{key: missing, path: config.yaml}]"),
        (", subPath: config.yaml", "[{key: missing, path: config.yaml}]"),
        (", subPath: ..", "[{key: config.yaml, path: ..}]"),
        ("/x", "[{key: config.yaml, path: ../config.yaml}]"),
        ("", "[{key: config.yaml, path: /etc/vllm/config.yaml}]"),
    ],
)
def test_configmap_items_kubernetes_refuses_mount_nothing(
    tmp_path: Path, mount: str, items: str
) -> None:
    path = tmp_path / "pod.yaml"
    path.write_text(CONFIGMAP_POD.replace(" MOUNT", mount).replace("ITEMS", items))
    found = read_input_set([path])
    assert not [s for s in found.skipped if s.problem], found.skipped
    (invocation,) = found.invocations
    assert all(key != "max-model-len" for key, _, _ in invocation.config_items)


@pytest.mark.parametrize(
    "text",
    [
        "1e999Gi",
        "-5Gi",
        "0x10",
        "NaN",
        ".inf",
        "\u0661\u0662Gi",
        "9" * 5000,
        "1e" + "9" * 5000,
        "9" * 5000 + "Gi",
        "1e65",
        "",
    ],
)
def test_quantities_that_are_no_memory_size(text: str) -> None:
    assert parse_bytes(text) is None


@pytest.mark.parametrize(
    "text", ["9" * 5000 + "g", "1." + "9" * 5000, "\u0661\u0662g", "-5g", "0x10"]
)
def test_docker_sizes_that_are_no_memory_size(text: str) -> None:
    assert parse_docker_bytes(text) is None


def test_a_huge_memory_limit_is_a_note_and_the_other_files_are_read(tmp_path: Path) -> None:
    pod = DEPLOYMENT.replace(
        'args: ["m", "--max-model-len", "4096"]',
        'args: ["m"]\n          resources: {limits: {memory: "' + "9" * 5000 + 'Gi"}}',
    )
    (tmp_path / "a.yaml").write_text(pod)
    (tmp_path / "b.yaml").write_text(DEPLOYMENT)
    found = read_input_set([tmp_path / "a.yaml", tmp_path / "b.yaml"])
    assert len(found.invocations) == 2 and not found.skipped
    huge = next(i for i in found.invocations if i.file and i.file.endswith("a.yaml"))
    assert any("not a Kubernetes quantity" in note for note in huge.notes)


@pytest.mark.parametrize("count", ["²", "9" * 5000, "-1", "1e400", "[1]"])
def test_kaito_resource_count_that_is_no_number(count: str) -> None:
    workspace = f"""\
apiVersion: kaito.sh/v1beta1
kind: Workspace
metadata: {{name: ws}}
resource:
  count: {count}
  instanceType: Standard_NC48ads_A100_v4
inference:
  preset: {{name: phi-4-mini-instruct}}
"""
    (invocation,) = read_text(workspace, "ws.yaml", input_format="kubernetes")
    if count != "[1]":
        assert any("resource.count" in note for note in invocation.notes), invocation.notes


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("pip install lmcache==" + "9" * 5000 + ".1.1\n", "Dockerfile"),
        ("pip install lmcache==\u0661.\u0662.\u0663\n", "Dockerfile"),
        ("lmcache==\u0661.\u0662.\u0663\n", "requirements.txt"),
        ("lmcache==0.3.9\x1b[2J\n", "requirements.txt"),
    ],
)
def test_odd_pins_are_no_release(text: str, name: str) -> None:
    assert pins_in_text(text, name) == ()


def test_pins_keep_their_lines() -> None:
    text = "RUN pip install vllm lmcache==0.3.9 && pip install x \\\n  lmcache==0.3.8\n\n"
    text += 'RUN pip install "lmcache[cuda]==0.3.7.post1"\n'
    pins = pins_in_text(text, "Dockerfile")
    assert [(p.version, p.origin.rsplit(":", 1)[1]) for p in pins] == [
        ("0.3.9", "1"),
        ("0.3.8", "1"),
        ("0.3.7.post1", "4"),
    ]


def _workflow(count: int) -> str:
    # The shape of a workflow starting vLLM (vllm-project/vllm .github/workflows).
    steps = "".join(
        f"      - name: serve {n}\n        env: {{PORT: '{8000 + n % 1000}'}}\n"
        f"        run: vllm serve ${{{{ matrix.model }}}} --port $PORT\n"
        for n in range(count)
    )
    return f"on: push\njobs:\n  serve:\n    runs-on: ubuntu-latest\n    steps:\n{steps}"


def _read_workflow(text: str) -> None:
    read_text(text, "ci.yml", input_format="github-actions")


def _pod_of(count: int) -> str:
    # One pod, many containers mounting a memory emptyDir and a ConfigMap (as above).
    containers = "".join(
        f"    - name: c{n}\n      image: vllm/vllm-openai:v0.20.0\n      args: [--model, m]\n"
        f"      resources: {{limits: {{memory: {n + 1}Gi}}}}\n"
        f"      volumeMounts: [{{name: shm, mountPath: /dev/shm}}, {{name: c, mountPath: /c}}]\n"
        for n in range(count)
    )
    volumes = (
        "  volumes: [{name: shm, emptyDir: {medium: Memory}}, {name: c, configMap: {name: x}}]\n"
    )
    head = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n"
    return head + containers + volumes


@functools.cache
def _composed(text: str) -> yaml.Node:
    """Composed once (not timed): the readers' own work is what is measured."""
    (document,) = yaml_tree.compose_documents(text, "pod.yaml")
    return document


def _read_pod_resources(text: str) -> None:
    """What the container-resource and ConfigMap readers add per container, on their own:
    the pod-mates list every invocation carries is n per container by design."""
    from kvtool.audit.inputs import configmap_files, container_resources

    pod = _composed(text)
    spec = yaml_tree.get(pod, "spec")
    for container in yaml_tree.sequence(yaml_tree.get(spec, "containers")):
        container_resources.read_resources(container, spec, "pod.yaml", [])
        configmap_files.mounted_files(container, pod, {})


def _pip_line(count: int) -> str:
    return "RUN " + "pip install x " * count + "lmcache\n" + "pip install lmcache==0.3.9\n" * count


def _read_pins(text: str) -> None:
    pins_in_text(text, "Dockerfile")


def _overlay_patch(count: int) -> str:
    ops = "".join(
        f"      - op: add\n        path: /spec/template/spec/containers/0/args/-\n"
        f"        value: --served-model-name=m{n}\n"
        for n in range(count)
    )
    head = "resources: [deployment.yaml]\npatches:\n  - target: {kind: Deployment}\n    patch: |-\n"
    return head + ops


def _read_overlay(text: str) -> None:
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "deployment.yaml").write_text(DEPLOYMENT)
        read_text(text, "kustomization.yaml", input_format="kubernetes", base_dir=Path(folder))


@pytest.mark.parametrize(
    ("make", "read", "base"),
    [
        (_workflow, _read_workflow, 25),
        (_pod_of, _read_pod_resources, 250),
        (_pip_line, _read_pins, 500),
        (_overlay_patch, _read_overlay, 50),
    ],
    ids=["github-actions-steps", "pod-containers", "pip-pins", "kustomize-json-patch-ops"],
)
def test_new_readers_grow_linearly(make: Any, read: Any, base: int) -> None:
    """As tests/hostile/test_limits.py times the older readers: CPU time, best of three,
    16x the input at most 16 x 3 the time."""
    texts = [make(base), make(4 * base), make(16 * base)]
    best = [float("inf")] * len(texts)
    for _ in range(3):
        for index, text in enumerate(texts):
            started = time.process_time()
            read(text)
            best[index] = min(best[index], time.process_time() - started)
    one, four, sixteen = best
    assert four < 4 * 3 * one, (one, four)
    assert sixteen < 16 * 3 * one, (one, sixteen)


# Hypothesis: the new readers' shapes with hostile values in every place they index.
_FRAGMENTS = st.sampled_from(
    [
        "[1]",
        "{a: 1}",
        "null",
        "7",
        "1e400",
        "-5Gi",
        "0x10",
        ".nan",
        "'1e999Gi'",
        "''",
        "'${{ x }}'",
        '"\\e[2J"',
        "[--model, 7, null, [1]]",
        "{containers: 7}",
        "[{name: [1], image: {a: 1}, args: 7}]",
        "'" + "9" * 5000 + "'",
        "'²'",
        "'/spec/template/spec/containers/999999999/args/-'",
        "'../../etc/passwd'",
        "..",
    ]
)
_HOLE_VALUES = st.one_of(_FRAGMENTS, st.text(alphabet="ab: -[]{}&*!|>'\"#,0123${}", max_size=30))

_SHAPES = {
    "dynamo": """\
apiVersion: nvidia.com/v1alpha1
kind: DynamoGraphDeployment
metadata: {name: d}
spec:
  services:
    VllmWorker:
      extraPodSpec:
        mainContainer:
          image: nvcr.io/nvidia/ai-dynamo/vllm-runtime:0.4.0
          command: [python3, -m, dynamo.vllm]
          args: [--model, HOLE, HOLE, --connector, HOLE]
          resources: {limits: {memory: HOLE}}
""",
    "kserve": """\
apiVersion: serving.kserve.io/v1beta1
kind: InferenceService
metadata: {name: isvc}
spec:
  predictor:
    model:
      modelFormat: {name: huggingface}
      args: [--model_id=x, HOLE, HOLE]
      resources: {limits: {memory: HOLE}}
""",
    "kserve-llm": """\
apiVersion: serving.kserve.io/v1alpha1
kind: LLMInferenceService
metadata: {name: llm}
spec:
  model: {uri: HOLE}
  template: {containers: [{name: main, image: HOLE, command: [vllm, serve, HOLE]}]}
  prefill: HOLE
""",
    "modelservice": """\
modelArtifacts: {uri: HOLE, name: HOLE}
decode:
  replicas: 1
  containers: [{name: vllm, image: HOLE, modelCommand: vllmServe, args: [HOLE]}]
prefill: {containers: HOLE}
""",
    "ray-serve": """\
apiVersion: ray.io/v1
kind: RayService
metadata: {name: llm}
spec:
  serveConfigV2: |
    applications:
    - import_path: ray.serve.llm:build_openai_app
      args: {llm_configs: [{model_loading_config: HOLE, engine_kwargs: {max_model_len: HOLE}}]}
""",
    "kaito-preset": """\
apiVersion: kaito.sh/v1beta1
kind: Workspace
metadata: {name: ws}
resource: {count: HOLE, instanceType: HOLE}
inference: {preset: {name: phi-4-mini-instruct}, config: HOLE}
""",
    "pod-mounts": """\
apiVersion: v1
kind: Pod
metadata: {name: p}
spec:
  containers:
    - name: vllm
      image: vllm/vllm-openai:v0.20.0
      args: [--model, m, --config, HOLE]
      resources: {limits: {memory: HOLE}}
      volumeMounts: [{name: c, mountPath: HOLE, subPath: HOLE}]
  volumes: [{name: c, configMap: {name: cfg, items: [{key: HOLE, path: HOLE}]}}]
""",
    "github-actions": """\
on: push
jobs:
  j:
    env: {A: HOLE}
    steps:
      - name: HOLE
        run: vllm serve HOLE --port HOLE
""",
}
_SHAPE_FORMAT = {"github-actions": "github-actions"}


def _filled(shape: str, values: list[str]) -> str:
    parts = _SHAPES[shape].split("HOLE")
    holes = iter(values * len(parts))
    return "".join(
        part + (next(holes) if i < len(parts) - 1 else "") for i, part in enumerate(parts)
    )


def _bounded_read(read: Any) -> None:
    started = time.perf_counter()
    with contextlib.suppress(KvtoolError):
        read()
    assert time.perf_counter() - started < 2.0


@pytest.mark.parametrize("shape", sorted(_SHAPES))
@settings(max_examples=25, deadline=None)
@given(values=st.lists(_HOLE_VALUES, min_size=1, max_size=6))
def test_new_reader_shapes_with_hostile_values(shape: str, values: list[str]) -> None:
    text = _filled(shape, values)
    kind = _SHAPE_FORMAT.get(shape, "kubernetes")
    _bounded_read(lambda: read_text(text, "x.yaml", input_format=kind))


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet="0123456789.eE+-kKMGTPEimgbB x\u0661\u00b2", max_size=40))
def test_sizes_are_a_count_of_bytes_or_none(text: str) -> None:
    for parse in (parse_bytes, parse_docker_bytes):
        value = parse(text)
        assert value is None or (isinstance(value, int) and value >= 0)


_POINTER_TOKENS = st.sampled_from(
    ["spec", "a", "-", "0", "1", "²", "9" * 30, "~0", "~1", "", "containers", "args"]
)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["add", "replace", "remove", "move", "copy"]),
            st.lists(_POINTER_TOKENS, min_size=1, max_size=5),
            st.sampled_from(["x", "[1, 2]", "{a: 1}", "&v {k: [1]}", "*v", "null"]),
        ),
        min_size=1,
        max_size=8,
    )
)
def test_json_patches_leave_a_tree(ops: list[tuple[str, list[str], str]]) -> None:
    """Any sequence of operations applies or gives a reason, and the target stays a tree."""
    lines, anchored = [], False
    for op, tokens, value in ops:
        if value.startswith(("&v", "*v")):  # one anchor, then aliases of it
            value = "*v" if anchored else "&v {k: [1]}"
            anchored = True
        pointer = "/" + "/".join(tokens)
        lines.append(f"- {{op: {op}, path: '{pointer}', value: {value}}}")
    (target,) = yaml_tree.compose_documents("spec: {containers: [{args: [a]}]}\n", "base.yaml")
    operations = json_patch.operations(yaml_tree.compose_documents("\n".join(lines), "p.yaml")[0])
    assert operations is not None
    for operation in operations:
        assert isinstance(json_patch.apply(target, operation), str | None)
    assert _sizes(target, 10_000) < 10_000


def test_an_overlay_adds_a_bounded_number_of_notes(tmp_path: Path) -> None:
    """Thousands of missing resources and failing operations: a few lines per container."""
    failing = "".join(f"      - {{op: remove, path: /spec/none{n}}}\n" for n in range(2_000))
    patches = ADD_ARG + failing
    kustomization = _overlay(tmp_path, ["../base", *(f"m{n}.yaml" for n in range(2_000))], patches)
    (invocation,) = _patched(kustomization)
    assert len(invocation.notes) <= 30
    assert any("more notes" in note for note in invocation.notes)


@pytest.mark.parametrize("value", ["0", "²", "9" * 5000, "99999999999", "-2", "[1]"])
def test_modelservice_parallelism_that_is_no_size(value: str) -> None:
    """llm-d-modelservice values (llm-d-incubation/llm-d-modelservice values.yaml shape)."""
    values = f"""\
modelArtifacts: {{uri: hf://Qwen/Qwen3-0.6B, name: Qwen/Qwen3-0.6B}}
decode:
  parallelism: {{tensor: {value}, dataLocal: {value}, workers: {value}}}
  containers: [{{name: vllm, image: ghcr.io/llm-d/llm-d-cuda:v0.3.0, modelCommand: vllmServe}}]
"""
    (invocation,) = read_text(values, "values.yaml", input_format="kubernetes")
    assert "--tensor-parallel-size" not in [t.text for t in invocation.tokens]


def test_modelservice_zero_workers_is_no_division() -> None:
    values = """\
modelArtifacts: {uri: hf://Qwen/Qwen3-0.6B, name: Qwen/Qwen3-0.6B}
decode:
  parallelism: {data: 4, workers: 0}
  containers: [{name: vllm, image: ghcr.io/llm-d/llm-d-cuda:v0.3.0, modelCommand: vllmServe}]
"""
    (invocation,) = read_text(values, "values.yaml", input_format="kubernetes")
    words = [t.text for t in invocation.tokens]
    assert words[words.index("--data-parallel-size") + 1] == "4"


@pytest.mark.parametrize(
    ("name", "matches"),
    [
        ("(a+)+$", False),
        ("(a|a)*", False),
        (".*.*.*.*.*.*.*x", False),
        ("a" * 30 + "(a?){30}", False),
        ("vllm-.*", True),
        ("vllm-(prefill|decode)", True),
    ],
)
def test_target_names_match_in_bounded_time(tmp_path: Path, name: str, matches: bool) -> None:
    """The base object's name is a long run of one letter: backtracking patterns would
    take exponential (or high polynomial) time on it."""
    object_name = "vllm-decode" if matches else "a" * 250 + "!"
    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "deployment.yaml").write_text(
        DEPLOYMENT.replace("{name: vllm}", f"{{name: '{object_name}'}}")
    )
    patch = ADD_ARG.replace("name: vllm}", f"name: '{name}'}}")
    kustomization = tmp_path / "kustomization.yaml"
    kustomization.write_text("resources: [base/deployment.yaml]\n" + patch)
    started = time.process_time()
    found = read_input_set([kustomization])
    assert time.process_time() - started < 5
    assert bool(found.invocations) == matches
