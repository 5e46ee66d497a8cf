"""argv inputs and format detection."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvtool.audit.inputs import read_argv, read_inputs, read_text
from kvtool.audit.inputs.registry import detect_kind
from kvtool.errors import KvtoolError

REPO = Path(__file__).resolve().parents[3]


def test_argv_forms() -> None:
    full = read_argv(["vllm", "serve", "m", "-tp", "2"])
    assert [(t.text, t.index) for t in full.tokens] == [("m", 2), ("-tp", 3), ("2", 4)]
    assert full.kind == "argv" and full.label == "<argv>"
    module = read_argv(["python", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"])
    assert [t.text for t in module.tokens] == ["--model", "m"]
    cli_main = read_argv(["python3", "-m", "vllm.entrypoints.cli.main", "serve", "m"])
    assert [t.text for t in cli_main.tokens] == ["m"]
    assert [t.text for t in read_argv(["serve", "m"]).tokens] == ["m"]
    assert [t.text for t in read_argv(["m", "--port", "1"]).tokens] == ["m", "--port", "1"]


def test_argv_env_prefix_and_docker_image() -> None:
    invocation = read_argv(
        ["docker", "run", "--gpus", "all", "-e", "A=1", "vllm/vllm-openai:v0.32.0", "m"]
    )
    assert invocation.image == "vllm/vllm-openai:v0.32.0"
    assert [(e.name, e.value) for e in invocation.env] == [("A", "1")]
    assert [t.text for t in invocation.tokens] == ["m"]


def test_empty_argv_is_an_error() -> None:
    with pytest.raises(KvtoolError, match="no vLLM command given"):
        read_argv([])


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("lmcache-tp4.sh", "shell"),
        ("native-offload-clean.sh", "shell"),
        ("vllm-config.yaml", "vllm-config"),
        ("k8s-deployment.yaml", "kubernetes"),
        ("compose.yaml", "compose"),
        ("kaito-configmap.yaml", "kaito"),
    ],
)
def test_examples_are_detected_by_content(name: str, expected: str, tmp_path: Path) -> None:
    text = (REPO / "examples" / name).read_text()
    # The content decides, not the name: a neutral name gives the same answer.
    neutral = "input.txt" if expected == "shell" else "input.yaml"
    assert detect_kind(text, name) == expected
    assert detect_kind(text, neutral) == expected


def test_input_format_overrides_detection(tmp_path: Path) -> None:
    path = tmp_path / "serve.txt"
    path.write_text("tensor-parallel-size: 2\n")
    (invocation,) = read_inputs([path], input_format="vllm-config")
    assert invocation.kind == "vllm-config"
    with pytest.raises(KvtoolError, match="unknown format 'toml'"):
        read_inputs([path], input_format="toml")


def test_undetectable_and_missing_inputs() -> None:
    assert detect_kind("just some words\n", "notes.txt") is None
    with pytest.raises(KvtoolError, match="no such file"):
        read_inputs([Path("/nonexistent/run.sh")])


def test_json_manifest_from_kubectl_is_kubernetes() -> None:
    text = (
        '{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},\n'
        ' "spec": {"containers": [{"name": "c", "image": "vllm/vllm-openai:v0.32.0",\n'
        '   "args": ["m", "--port", "8000"]}]}}\n'
    )
    assert detect_kind(text, "pod.json") == "kubernetes"
    (invocation,) = read_text(text, "pod.json")
    port = invocation.tokens[1]
    assert port.location is not None and (port.location.line, port.location.column) == (3, 18)
