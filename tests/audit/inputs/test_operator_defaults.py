"""Shapes where the operator, not the file, supplies the serve command (or where a
values file carries template text), written in the form the cited public files use.

- KServe LLMInferenceService whose ``main`` container writes only env/resources:
  kserve/kserve docs/samples/llmisvc/single-node-gpu/llm-inference-service-pd-qwen2-7b-gpu.yaml
  and docs/samples/llmisvc/precise-prefix-kv-cache-routing/ (flags in
  ``VLLM_ADDITIONAL_ARGS``), run by config/llmisvcconfig/config-llm-template.yaml.
- Helm values with ``{{ .Values.x }}`` text for ``tpl``:
  llm-d-incubation/llm-d-modelservice examples/values-pd.yaml (``modelArtifacts.uri``).
"""

from __future__ import annotations

import json
from pathlib import Path

from kvtool.audit.engine import Auditor
from kvtool.audit.inputs import read_input_set
from kvtool.audit.inputs.detect import is_helm_values_name, is_template
from kvtool.audit.normalize import normalize
from kvtool.audit.settings import AuditSettings
from kvtool.audit.tables import ShippedTables
from kvtool.releases import release_index
from tests.audit.inputs.removed_flag import (
    GONE_AT,
    REMOVED,
    line_of,
    removed_at,
    removed_in_text,
)

F = REMOVED
KV = '{\\"kv_connector\\":\\"NixlConnector\\",\\"kv_role\\":\\"kv_consumer\\"}'

LLM_SERVICE = f"""\
apiVersion: serving.kserve.io/v1alpha2
kind: LLMInferenceService
metadata:
  name: qwen-pd
spec:
  model:
    uri: hf://Qwen/Qwen2.5-7B-Instruct
    name: Qwen/Qwen2.5-7B-Instruct
  template:
    containers:
      - name: main
        env:
          - name: VLLM_ADDITIONAL_ARGS
            value: "--block-size 64 {F} --kv_transfer_config '{KV}'"
        resources:
          limits:
            nvidia.com/gpu: "1"
  prefill:
    replicas: 2
    template:
      containers:
        - name: main
          image: ghcr.io/llm-d/llm-d-cuda:v0.9.0
          env:
            - name: VLLM_ADDITIONAL_ARGS
              value: >-
                --tensor-parallel-size=8
                {F}
"""


def _audit(tmp_path: Path, name: str, text: str):  # type: ignore[no-untyped-def]
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    found = read_input_set([path])
    settings = AuditSettings(vllm_version=GONE_AT)
    report = Auditor(ShippedTables(), normalize, settings, version_from_cli=True).run(
        found.invocations
    )
    return found, report


def test_llm_service_main_container_runs_the_configs_vllm_serve(tmp_path: Path) -> None:
    assert removed_in_text(tmp_path, "svc.yaml", LLM_SERVICE) == [
        ("svc.yaml", line_of(LLM_SERVICE, F)),
        ("svc.yaml", line_of(LLM_SERVICE, F, 2)),
    ]
    found, report = _audit(tmp_path, "svc.yaml", LLM_SERVICE)
    decode, prefill = found.invocations
    model = "Qwen/Qwen2.5-7B-Instruct"
    assert [t.text for t in decode.tokens[:3]] == [model, "--served-model-name", model]
    assert "--kv_transfer_config" in [t.text for t in decode.tokens]
    assert "--tensor-parallel-size=8" in [t.text for t in prefill.tokens]
    # KServe's script reads VLLM_ADDITIONAL_ARGS; vLLM never sees it, so it is no env finding.
    assert all("VLLM_ADDITIONAL_ARGS" not in f.message for f in report.findings)


def test_llm_service_pod_has_the_configs_dev_shm(tmp_path: Path) -> None:
    found, report = _audit(tmp_path, "svc.yaml", LLM_SERVICE)
    prefill = found.invocations[1]
    assert prefill.resources is not None
    shm = prefill.resources.mount_at("/dev/shm")
    assert shm is not None and shm.medium == "Memory" and shm.size_limit is not None
    assert shm.size_limit.bytes == 1 << 30
    # TP 8 needs /dev/shm beyond the runtime's 64 MiB; the config's 1 GiB holds it.
    assert all(f.code != "SZ014" for f in report.findings)


def test_llm_service_own_dev_shm_wins(tmp_path: Path) -> None:
    own = LLM_SERVICE.replace(
        "          image: ghcr.io/llm-d/llm-d-cuda:v0.9.0\n",
        "          image: ghcr.io/llm-d/llm-d-cuda:v0.9.0\n"
        "          volumeMounts: [{name: shm, mountPath: /dev/shm}]\n",
    ).replace(
        "    replicas: 2\n    template:\n",
        "    replicas: 2\n    template:\n      volumes:\n"
        "        - {name: shm, emptyDir: {medium: Memory, sizeLimit: 16Gi}}\n",
    )
    found, _ = _audit(tmp_path, "svc.yaml", own)
    resources = found.invocations[1].resources
    assert resources is not None
    shm = resources.mount_at("/dev/shm")
    assert shm is not None and shm.volume == "shm" and shm.size_limit is not None
    assert shm.size_limit.text == "16Gi"


def test_a_main_container_elsewhere_or_with_a_command_is_read_as_written(tmp_path: Path) -> None:
    deployment = (
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\nspec:\n  template:\n"
        "    spec:\n      containers:\n        - name: main\n          env:\n"
        "            - name: VLLM_ADDITIONAL_ARGS\n              value: --enforce-eager\n"
    )
    found, _ = _audit(tmp_path, "deploy.yaml", deployment)
    assert found.invocations == []
    commanded = LLM_SERVICE.replace(
        "      - name: main\n        env:\n",
        "      - name: main\n        command: [vllm, serve, /mnt/models, --enforce-eager]\n"
        "        env:\n",
    )
    found, _ = _audit(tmp_path, "svc.yaml", commanded)
    assert [t.text for t in found.invocations[0].tokens] == ["/mnt/models", "--enforce-eager"]


VALUES_WITH_TPL = f"""\
modelArtifacts:
  name: facebook/opt-125m
  uri: hf://"{{{{ .Values.modelArtifacts.name }}}}"
  size: 20Gi
decode:
  create: true
  containers:
  - name: "vllm"
    image: "ghcr.io/llm-d/llm-d-cuda:latest"
    modelCommand: vllmServe
    args:
      - "--enforce-eager"
      - "{F}"
"""


def test_values_file_with_tpl_text_is_read_not_skipped(tmp_path: Path) -> None:
    assert removed_in_text(tmp_path, "examples/values-pd.yaml", VALUES_WITH_TPL) == [
        ("values-pd.yaml", line_of(VALUES_WITH_TPL, F))
    ]


def test_a_template_is_still_a_template_whatever_its_name(tmp_path: Path) -> None:
    assert is_template(VALUES_WITH_TPL, "chart/templates/values.yaml")
    assert is_template(VALUES_WITH_TPL, "deployment.yaml")
    assert not is_template(VALUES_WITH_TPL, "examples/values-pd.yaml")
    for name in ("values.yaml", "values-pd.yaml", "ms-values.yml", "router.values.yaml"):
        assert is_helm_values_name(f"guides/x/{name}"), name
    for name in ("valuesets.yaml", "deployment.yaml", "values.json", "my_values_tool.py"):
        assert not is_helm_values_name(name), name


RAY_VALUES = f"""\
servingEngineSpec:
  modelSpec:
  - name: "distilgpt2-raycluster"
    repository: "lmcache/vllm-openai"
    tag: "latest"
    modelURL: "distilbert/distilgpt2"
    vllmConfig:
      tensorParallelSize: 1
      pipelineParallelSize: 2
      extraArgs: ["{F}"]
    raySpec:
      enabled: true
      headNode:
        requestGPU: 1
"""


def test_production_stack_ray_spec_runs_vllm_on_the_ray_head(tmp_path: Path) -> None:
    """Shape: vllm-project/production-stack tutorials/assets/
    values-15-a-minimal-pipeline-parallel-example-raycluster.yaml, rendered by
    helm/templates/ray-cluster.yaml's vllm-entrypoint.sh."""
    assert removed_in_text(tmp_path, "values-15.yaml", RAY_VALUES) == [
        ("values-15.yaml", line_of(RAY_VALUES, F))
    ]
    found, _ = _audit(tmp_path, "values-15.yaml", RAY_VALUES)
    (head,) = found.invocations
    words = [t.text for t in head.tokens]
    assert words[words.index("--distributed-executor-backend") + 1] == "ray"
    assert words[words.index("--pipeline-parallel-size") + 1] == "2"
    assert "--no-enable-prefix-caching" not in words  # the script writes only the true form


def test_production_stack_ray_spec_disabled_is_the_deployment(tmp_path: Path) -> None:
    off = RAY_VALUES.replace("      enabled: true\n", "      enabled: false\n")
    found, _ = _audit(tmp_path, "values-15.yaml", off)
    (engine,) = found.invocations
    words = [t.text for t in engine.tokens]
    assert "--distributed-executor-backend" not in words
    assert "--no-enable-prefix-caching" in words  # deployment-vllm-multi.yaml's form


MODELSERVICE_VALUES = """\
modelArtifacts:
  uri: "hf://Qwen/Qwen3-32B"
  name: "Qwen/Qwen3-32B"
decode:
  create: true
  parallelism:
    tensor: 2
    data: 4
    workers: 2
  containers:
    - name: "vllm"
      image: ghcr.io/llm-d/llm-d-cuda:v0.5.0
      modelCommand: vllmServe
      args:
        - "--gpu-memory-utilization=0.95"
"""


def _words(tmp_path: Path, name: str, text: str) -> list[list[str]]:
    found, _ = _audit(tmp_path, name, text)
    return [[t.text for t in i.tokens] for i in found.invocations]


def test_modelservice_parallelism_is_rendered_before_the_args(tmp_path: Path) -> None:
    """Shape: llm-d/llm-d guides/inference-scheduling/ms-inference-scheduling/values.yaml
    (``decode.parallelism.tensor``; the chart adds ``--tensor-parallel-size``, its
    _helpers.tpl ``vllmServeModelCommand``)."""
    (words,) = _words(tmp_path, "values.yaml", MODELSERVICE_VALUES)
    assert words == [
        "Qwen/Qwen3-32B",
        "--tensor-parallel-size", "2",
        "--data-parallel-size", "4",
        "--data-parallel-size-local", "2",
        "--served-model-name", "Qwen/Qwen3-32B",
        "--gpu-memory-utilization=0.95",
    ]  # fmt: skip
    found, _ = _audit(tmp_path, "values.yaml", MODELSERVICE_VALUES)
    tensor = found.invocations[0].tokens[1]
    assert tensor.location is not None
    assert tensor.location.line == line_of(MODELSERVICE_VALUES, "tensor: 2")


def test_modelservice_single_gpu_and_image_default(tmp_path: Path) -> None:
    single = MODELSERVICE_VALUES.replace("    tensor: 2\n    data: 4\n    workers: 2\n", "")
    single = single.replace("  parallelism:\n", "")
    (words,) = _words(tmp_path, "values.yaml", single)
    assert "--tensor-parallel-size" not in words and "--data-parallel-size" not in words
    image_default = single.replace("modelCommand: vllmServe", "modelCommand: imageDefault")
    image_default = image_default.replace(
        "ghcr.io/llm-d/llm-d-cuda:v0.5.0", "vllm/vllm-openai:v0.20.0"
    )
    (words,) = _words(tmp_path, "values.yaml", image_default)
    assert words[:2] == ["--model", "Qwen/Qwen3-32B"]
    simulator = image_default.replace(
        "vllm/vllm-openai:v0.20.0", "ghcr.io/llm-d/llm-d-inference-sim:v0.3"
    )
    assert _words(tmp_path, "values.yaml", simulator) == []


OFFLOADING_SERVICE = """\
apiVersion: serving.kserve.io/v1alpha2
kind: LLMInferenceService
metadata:
  name: qwen-offload
spec:
  model:
    uri: hf://Qwen/Qwen2.5-7B-Instruct
    name: Qwen/Qwen2.5-7B-Instruct
  parallelism:
    tensor: 2
  template:
    containers:
      - name: main
  kvCacheOffloading:
    cpu: "10Gi"
    evictionPolicy: lru
    secondary:
      - fileSystem:
          emptyDir:
            size: "100Gi"
  prefill:
    template:
      containers:
        - name: main
          env:
            - name: VLLM_ADDITIONAL_ARGS
              value: --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'
"""


def test_llm_service_kv_cache_offloading_and_parallelism(tmp_path: Path) -> None:
    """Shape: kserve/kserve docs/samples/llmisvc/kv-cache-offloading/ (``kvCacheOffloading``
    with a ``fileSystem`` tier), rendered by pkg/controller/v1alpha2/llmisvc/config_merge.go
    ``kvTransferConfig``; ``parallelism`` is the WorkloadSpec field of
    pkg/apis/serving/v1alpha2/llm_inference_service_types.go."""
    found, _ = _audit(tmp_path, "svc.yaml", OFFLOADING_SERVICE)
    decode, prefill = found.invocations
    words = [t.text for t in decode.tokens]
    config = json.loads(words[words.index("--kv-transfer-config") + 1])
    assert config["kv_connector"] == "OffloadingConnector" and config["kv_role"] == "kv_both"
    assert config["kv_connector_extra_config"] == {
        "spec_name": "TieringOffloadingSpec",
        "cpu_bytes_to_use": 10 * 2**30,
        "eviction_policy": "lru",
        "secondary_tiers": [{"type": "fs", "root_dir": "/mnt/kv-cache-0"}],
    }
    at = decode.tokens[words.index("--kv-transfer-config")].location
    assert at is not None and at.line == line_of(OFFLOADING_SERVICE, 'cpu: "10Gi"')
    assert words[words.index("--tensor-parallel-size") + 1] == "2"
    # The prefill workload has no kvCacheOffloading or parallelism of its own, and its own
    # --kv-transfer-config is the only one.
    prefill_words = [t.text for t in prefill.tokens]
    assert prefill_words.count("--kv-transfer-config") == 1
    assert "--tensor-parallel-size" not in prefill_words


def test_llm_service_offloading_beyond_the_configs_dev_shm_is_found(tmp_path: Path) -> None:
    """10Gi of CPU tier against the well-known config's 1Gi /dev/shm: the newest release's
    OffloadingConnector keeps its tier in /dev/shm (SZ013), so the finding lands on ``cpu``."""
    path = tmp_path / "svc.yaml"
    path.write_text(OFFLOADING_SERVICE, encoding="utf-8")
    found = read_input_set([path])
    newest = release_index().versions[-1]
    settings = AuditSettings(vllm_version=newest)
    report = Auditor(ShippedTables(), normalize, settings, version_from_cli=True).run(
        found.invocations
    )
    (shm,) = [f for f in report.findings if f.code == "SZ013"]
    assert shm.location is not None and shm.location.line == line_of(OFFLOADING_SERVICE, "cpu:")
    roomy = OFFLOADING_SERVICE.replace('cpu: "10Gi"', 'cpu: "512Mi"')
    path.write_text(roomy, encoding="utf-8")
    report = Auditor(ShippedTables(), normalize, settings, version_from_cli=True).run(
        read_input_set([path]).invocations
    )
    assert all(f.code != "SZ013" for f in report.findings)


def test_offloading_under_spec_workload_is_noted_not_applied(tmp_path: Path) -> None:
    """kserve/kserve docs/samples/llmisvc/kv-cache-offloading/ writes ``spec.workload.
    kvCacheOffloading``; the v1alpha2 type inlines WorkloadSpec into ``spec``."""
    misplaced = OFFLOADING_SERVICE.replace(
        '  kvCacheOffloading:\n    cpu: "10Gi"\n    evictionPolicy: lru\n',
        '  workload:\n    kvCacheOffloading:\n      cpu: "10Gi"\n      evictionPolicy: lru\n',
    ).replace(
        "    secondary:\n      - fileSystem:\n          emptyDir:\n            size: \"100Gi\"\n",
        "",
    )
    found, _ = _audit(tmp_path, "svc.yaml", misplaced)
    decode = found.invocations[0]
    assert "--kv-transfer-config" not in [t.text for t in decode.tokens]
    assert any("spec.workload.kvCacheOffloading is not a field" in n for n in decode.notes)


CHART_VALUES = """\
image:
  repository: "vllm/vllm-openai"
  tag: "v0.20.0"
  command: ["vllm", "serve", "/data/", "--served-model-name", "opt-125m"]
  env:
    - name: VLLM_LOGGING_LEVEL
      value: "DEBUG"
configs:
  VLLM_LOGGING_LEVEL: INFO
  PYTHONHASHSEED: "0"
"""


def test_vllm_chart_configs_are_the_containers_env(tmp_path: Path) -> None:
    """Shape: vllm-project/vllm examples/online_serving/chart-helm/values.yaml ``configs``,
    a ConfigMap the chart's templates/deployment.yaml gives the container by envFrom."""
    found, _ = _audit(tmp_path, "values.yaml", CHART_VALUES)
    (engine,) = found.invocations
    env = {e.name: e for e in engine.env}
    assert env["PYTHONHASHSEED"].value == "0"
    seed = env["PYTHONHASHSEED"].location
    assert seed is not None and seed.line == line_of(CHART_VALUES, "PYTHONHASHSEED")
    # image.env is applied after envFrom: it wins
    assert [e.value for e in engine.env if e.name == "VLLM_LOGGING_LEVEL"][-1] == "DEBUG"


CONFIGMAP_CONFIG = f"""\
apiVersion: v1
kind: ConfigMap
metadata:
  name: vllm-config
data:
  serve.yaml: |
    model: meta-llama/Llama-3.1-8B-Instruct
    {F.removeprefix("--")}: true
    max-model-len: 8192
---
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
          args: ["--config", "/etc/vllm/serve.yaml"]
          volumeMounts:
            - name: cfg
              mountPath: /etc/vllm
      volumes:
        - name: cfg
          configMap:
            name: vllm-config
"""


def test_config_file_from_a_mounted_configmap_is_read(tmp_path: Path) -> None:
    """vLLM's ``--config`` YAML (vllm-project/vllm docs/configuration/serve_args.md) kept
    in a ConfigMap and mounted into the pod by a configMap volume
    (https://kubernetes.io/docs/concepts/storage/volumes/#configmap)."""
    assert removed_in_text(tmp_path, "deploy.yaml", CONFIGMAP_CONFIG) == [
        ("deploy.yaml", line_of(CONFIGMAP_CONFIG, F.removeprefix("--") + ":"))
    ]
    sub_path = CONFIGMAP_CONFIG.replace(
        "              mountPath: /etc/vllm\n",
        "              mountPath: /etc/vllm/serve.yaml\n              subPath: serve.yaml\n",
    )
    assert removed_in_text(tmp_path, "deploy.yaml", sub_path) == [
        ("deploy.yaml", line_of(CONFIGMAP_CONFIG, F.removeprefix("--") + ":"))
    ]
    # the ConfigMap in another file of the run is found too
    head, _, deployment = CONFIGMAP_CONFIG.partition("---\n")
    (tmp_path / "split").mkdir()
    (tmp_path / "split" / "cm.yaml").write_text(head, encoding="utf-8")
    (tmp_path / "split" / "deploy.yaml").write_text(deployment, encoding="utf-8")
    assert removed_at(read_input_set([tmp_path / "split"])) == [
        ("cm.yaml", line_of(head, F.removeprefix("--") + ":"))
    ]


def test_a_config_path_no_configmap_mounts_is_still_unread(tmp_path: Path) -> None:
    elsewhere = CONFIGMAP_CONFIG.replace("mountPath: /etc/vllm\n", "mountPath: /etc/other\n")
    found, _ = _audit(tmp_path, "deploy.yaml", elsewhere)
    (engine,) = found.invocations
    assert engine.config_items == ()
    assert any("no such file here" in note for note in engine.notes)


def test_kserve_config_templates_are_skipped_with_what_to_audit(tmp_path: Path) -> None:
    """kserve/kserve config/llmisvcconfig/config-llm-template.yaml: Go template actions
    the KServe controller fills, not a Helm chart."""
    config = tmp_path / "config-llm-template.yaml"
    config.write_text(
        "apiVersion: serving.kserve.io/v1alpha2\nkind: LLMInferenceServiceConfig\n"
        "metadata:\n  name: kserve-config-llm-template\nspec:\n  template:\n    containers:\n"
        "      - name: main\n        command: [/bin/bash, -c]\n        args:\n"
        '          - vllm serve /mnt/models --served-model-name "{{ .Spec.Model.Name }}"'
        " {{ if .GlobalConfig.EnableTLS }}--enable-ssl-refresh{{- end }}\n",
        encoding="utf-8",
    )
    found = read_input_set([config])
    (skipped,) = found.skipped
    assert "LLMInferenceServiceConfig" in skipped.reason and "helm" not in skipped.reason
    assert not skipped.problem


def test_the_routers_main_container_is_not_a_vllm_server(tmp_path: Path) -> None:
    """kserve/kserve docs/samples/llmisvc/e2e-gpt-oss/llmisvc_config_default.yaml: the
    scheduler's container under ``router.scheduler.template`` is also named ``main``."""
    with_router = LLM_SERVICE.replace(
        "  template:\n    containers:\n      - name: main\n        env:\n",
        "  router:\n    scheduler:\n      template:\n        containers:\n"
        "          - name: main\n"
        "            image: ghcr.io/llm-d/llm-d-router-endpoint-picker:v0.10.0\n"
        "            args: [--pool-name, p, --zap-encoder, json, --secure-serving]\n"
        "  template:\n    containers:\n      - name: main\n        env:\n",
    )
    found, report = _audit(tmp_path, "svc.yaml", with_router)
    assert len(found.invocations) == 2  # main/decode and prefill, not the router
    assert all(f.code != "VG001" for f in report.findings)
