"""YAML inputs: vLLM --config files, Kubernetes manifests, compose files, KAITO ConfigMaps.

Locations come from PyYAML's node marks; each test checks line and column of what
it reads against the text it wrote.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kvtool.audit.inputs import read_inputs, read_text
from kvtool.audit.model import Invocation, Location
from kvtool.errors import KvtoolError

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = REPO / "examples"


def token_at(invocation: Invocation, text: str) -> tuple[int | None, int | None]:
    token = next(t for t in invocation.tokens if t.text == text)
    assert token.location is not None
    return token.location.line, token.location.column


# -- vLLM --config ------------------------------------------------------------


def test_vllm_config_items_keep_key_locations() -> None:
    (invocation,) = read_inputs([EXAMPLES / "vllm-config.yaml"])
    assert invocation.kind == "vllm-config"
    items = {key: (value, loc.line if loc else None) for key, value, loc in invocation.config_items}
    assert items["tensor-parallel-size"] == (2, 6)
    assert items["kv-transfer-config"][0]["kv_connector"] == "OffloadingConnector"


def test_vllm_config_must_be_a_mapping() -> None:
    with pytest.raises(KvtoolError, match=r"c\.yaml:1:1: a vLLM --config file must be a mapping"):
        read_text("- a\n- b\n", "c.yaml", input_format="vllm-config")


def test_malformed_yaml_names_file_line_and_column() -> None:
    with pytest.raises(KvtoolError, match=r"c\.yaml:3:1: invalid YAML: .*','"):
        read_text("a: 1\nb: [1, 2\n", "c.yaml", input_format="vllm-config")


# -- Kubernetes -----------------------------------------------------------------

DEPLOYMENT = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: server
  annotations:
    kvtool.io/ignore: "SZ001=sized per rank, reviewed, ok, CN010=legacy"
spec:
  template:
    spec:
      containers:
        - name: sidecar
          image: busybox
          command: ["sleep", "infinity"]
        - name: vllm
          image: vllm/vllm-openai:v0.30.0
          args:
            - org/model
            # kvtool: ignore[VG005] removed flag kept for the old image
            - --calculate-kv-scales
            - --kv-offloading-size=$(SIZE)
          env:
            - name: SIZE
              value: "64"
            - name: HF_TOKEN
              valueFrom: {secretKeyRef: {name: hf, key: token}}
"""


def test_deployment_container_args_env_image_and_locations() -> None:
    (invocation,) = read_text(DEPLOYMENT, "d.yaml")
    assert invocation.kind == "kubernetes"
    assert invocation.label == "d.yaml: Deployment/server container vllm"
    assert invocation.image == "vllm/vllm-openai:v0.30.0"
    # No command: the image's entrypoint (vllm serve) gets args; $(SIZE) expanded from env.
    assert [t.text for t in invocation.tokens] == [
        "org/model",
        "--calculate-kv-scales",
        "--kv-offloading-size=64",
    ]
    assert token_at(invocation, "--calculate-kv-scales") == (19, 15)
    assert [(e.name, e.value) for e in invocation.env] == [("SIZE", "64"), ("HF_TOKEN", None)]


def test_annotation_and_comment_suppressions() -> None:
    (invocation,) = read_text(DEPLOYMENT, "d.yaml")
    by_code = {s.codes[0]: s for s in invocation.suppressions}
    assert by_code["SZ001"].reason == "sized per rank, reviewed, ok"
    assert by_code["SZ001"].scope == "invocation"
    assert by_code["CN010"].reason == "legacy"
    assert by_code["VG005"].target_line == 19
    assert by_code["VG005"].location == Location(file="d.yaml", line=18, column=13)


def test_shell_wrapped_command_in_a_block_scalar_keeps_locations() -> None:
    manifest = """\
apiVersion: v1
kind: Pod
metadata: {name: p}
spec:
  containers:
    - name: c
      image: vllm/vllm-openai:v0.32.0
      command:
        - /bin/sh
        - -c
        - |
          echo starting
          exec vllm serve org/m \\
            --kv-offloading-size 16
"""
    (invocation,) = read_text(manifest, "p.yaml")
    assert [t.text for t in invocation.tokens] == ["org/m", "--kv-offloading-size", "16"]
    assert token_at(invocation, "--kv-offloading-size") == (14, 13)
    assert token_at(invocation, "org/m") == (13, 27)


def test_shell_wrapped_command_in_a_flow_sequence() -> None:
    manifest = (
        "apiVersion: batch/v1\nkind: Job\nmetadata: {name: j}\nspec:\n  template:\n"
        "    spec:\n      containers:\n"
        '        - {name: c, image: x, command: ["sh", "-c", "vllm serve m --port 1"]}\n'
    )
    (invocation,) = read_text(manifest, "j.yaml")
    assert token_at(invocation, "--port") == (8, 67)


def test_leaderworkerset_statefulset_and_multi_document_example() -> None:
    invocations = read_inputs([EXAMPLES / "k8s-deployment.yaml"])
    labels = [i.label.split(": ", 1)[1] for i in invocations]
    assert labels[0] == "Deployment/llama-70b container vllm"
    assert labels[1].startswith("LeaderWorkerSet/deepseek-multinode leader container leader")
    leader = invocations[1]
    assert token_at(leader, "--calculate-kv-scales")[0] == 62
    statefulset = read_text(
        "apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: s}\nspec:\n  template:\n"
        "    spec:\n      containers:\n        - name: c\n          image: i\n"
        "          command: [vllm, serve, m]\n",
        "s.yaml",
    )
    assert [t.text for t in statefulset[0].tokens] == ["m"]


def test_non_vllm_workloads_give_nothing() -> None:
    with pytest.raises(KvtoolError, match="no vLLM server command found"):
        read_text(
            "apiVersion: v1\nkind: Service\nmetadata: {name: s}\nspec: {ports: [{port: 80}]}\n",
            "svc.yaml",
        )


# -- docker compose ----------------------------------------------------------------


def test_compose_string_command_with_image_entrypoint() -> None:
    (invocation,) = read_inputs([EXAMPLES / "compose.yaml"])
    assert invocation.kind == "compose"
    assert invocation.image == "vllm/vllm-openai:v0.31.0"
    assert token_at(invocation, "--kv-offloading-size") == (14, 7)
    assert token_at(invocation, "--mamba-cache-mode") == (15, 7)
    env = {e.name: e.value for e in invocation.env}
    assert env == {"HF_TOKEN": None, "VLLM_PREFIX_CACHE_RETENTION_INTERVAL": "64"}


def test_compose_entrypoint_list_and_environment_map() -> None:
    text = """\
services:
  api:
    image: python:3.12
    entrypoint: ["python3", "-m", "vllm.entrypoints.openai.api_server"]
    command: ["--model", "org/m", "--port", "8000"]
    environment:
      VLLM_LOGGING_LEVEL: DEBUG
  db:
    image: postgres
"""
    (invocation,) = read_text(text, "compose.yaml")
    assert [t.text for t in invocation.tokens] == ["--model", "org/m", "--port", "8000"]
    assert token_at(invocation, "--port") == (5, 35)
    assert [(e.name, e.value) for e in invocation.env] == [("VLLM_LOGGING_LEVEL", "DEBUG")]


# -- KAITO ----------------------------------------------------------------------------


def test_kaito_configmap_vllm_section_and_settings() -> None:
    (invocation,) = read_inputs([EXAMPLES / "kaito-configmap.yaml"])
    assert invocation.kind == "kaito"
    items = {
        key: (value, loc.line, loc.column) for key, value, loc in invocation.config_items if loc
    }
    assert items["swap-space"] == (4, 16, 7)
    assert items["enable-chunked-prefill"] == (False, 19, 7)
    value, location = invocation.settings["kv_cache_cpu_memory_utilization"]
    assert value == 0.5 and location is not None and location.line == 11


def test_kaito_configmap_next_to_a_workload_is_read_by_the_manifest_reader() -> None:
    text = (EXAMPLES / "kaito-configmap.yaml").read_text() + "---\n" + DEPLOYMENT
    kinds = [i.kind for i in read_text(text, "all.yaml")]
    assert kinds == ["kaito", "kubernetes"]


def test_forced_kaito_format_without_inference_config_is_an_error() -> None:
    with pytest.raises(KvtoolError, match="no KAITO inference ConfigMap"):
        read_text(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {a: b}\n",
            "x.yaml",
            input_format="kaito",
        )


def test_compose_string_command_running_a_shell_keeps_locations() -> None:
    text = 'services:\n  s:\n    image: x\n    command: sh -c "vllm serve m --port 1"\n'
    (invocation,) = read_text(text, "compose.yaml")
    assert token_at(invocation, "--port") == (4, 34)
