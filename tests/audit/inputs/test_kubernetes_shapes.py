"""Kubernetes objects as real deployments write them: a removed flag is found at its line.

Each shape is written here in the form the cited public repository uses (not copied).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kvtool.audit.engine import Auditor
from kvtool.audit.inputs import NoServerCommand, StdinInput, read_input_set, read_text
from kvtool.audit.normalize import normalize
from kvtool.audit.settings import AuditSettings
from kvtool.audit.tables import ShippedTables
from kvtool.releases import version_from_image
from tests.audit.inputs.removed_flag import (
    REMOVED,
    line_of,
    removed_at,
    removed_in_stdin,
    removed_in_text,
)

F = REMOVED

SHAPES: dict[str, str] = {
    # vllm-project/production-stack helm output: Deployment, block-list command + args.
    "deployment-block-lists": f"""\
apiVersion: apps/v1
kind: Deployment
metadata: {{name: d}}
spec:
  template:
    spec:
      containers:
        - name: vllm
          image: vllm/vllm-openai:v0.20.0
          command:
            - vllm
            - serve
          args:
            - m
            - {F}
""",
    # vllm-project/vllm docs/deployment/k8s.md: command as a flow list.
    "deployment-flow-list": f"""\
apiVersion: apps/v1
kind: Deployment
metadata: {{name: d}}
spec:
  template:
    spec:
      containers:
      - name: server
        image: vllm/vllm-openai:latest
        command: ["vllm", "serve", "m", "{F}"]
""",
    # kubernetes-sigs/lws docs/examples/vllm: LeaderWorkerSet with `sh -c` bodies.
    "leaderworkerset-sh-c": f"""\
apiVersion: leaderworkerset.x-k8s.io/v1
kind: LeaderWorkerSet
metadata: {{name: lws}}
spec:
  leaderWorkerTemplate:
    leaderTemplate:
      spec:
        containers:
          - name: vllm-leader
            image: vllm/vllm-openai:latest
            command:
              - sh
              - -c
              - "bash /vllm-workspace/multi-node-serving.sh leader;
                 vllm serve m --tensor-parallel-size 8 {F}"
    workerTemplate:
      spec:
        containers:
          - name: vllm-worker
            image: vllm/vllm-openai:latest
            command: ["sh", "-c", "bash multi-node-serving.sh worker"]
""",
    # argoproj/argo-rollouts examples: Rollout keeps a pod template like a Deployment.
    "argo-rollout": f"""\
apiVersion: argoproj.io/v1alpha1
kind: Rollout
metadata: {{name: r}}
spec:
  strategy: {{canary: {{steps: [{{setWeight: 20}}]}}}}
  template:
    spec:
      containers:
      - name: vllm
        image: vllm/vllm-openai:v0.20.0
        args: ["m", "{F}"]
""",
    # kserve/kserve docs/samples: ServingRuntime running the api_server module, `--k=v` args.
    "kserve-servingruntime": f"""\
apiVersion: serving.kserve.io/v1alpha1
kind: ServingRuntime
metadata: {{name: vllm-runtime}}
spec:
  supportedModelFormats: [{{name: vLLM, autoSelect: true}}]
  containers:
    - name: kserve-container
      image: quay.io/modh/vllm:rhoai-2.20
      command: [python, -m, vllm.entrypoints.openai.api_server]
      args:
        - --port=8080
        - --model=/mnt/models
        - --served-model-name={{{{.Name}}}}
        - {F}
""",
    # kserve/kserve config/llmisvc: LLMInferenceService, an inline pod template.
    "kserve-llminferenceservice": f"""\
apiVersion: serving.kserve.io/v1alpha1
kind: LLMInferenceService
metadata: {{name: llm}}
spec:
  model: {{uri: "hf://Qwen/Qwen3-0.6B"}}
  template:
    containers:
      - name: main
        image: ghcr.io/llm-d/llm-d-cuda:v0.2.0
        command: [vllm, serve, /mnt/models]
        args: ["{F}"]
""",
    # kserve/kserve docs: InferenceService with a custom predictor container.
    "kserve-inferenceservice": f"""\
apiVersion: serving.kserve.io/v1beta1
kind: InferenceService
metadata: {{name: isvc}}
spec:
  predictor:
    containers:
      - name: kserve-container
        image: vllm/vllm-openai:v0.20.0
        args: [--model, m, {F}]
""",
    # ray-project/kuberay ray-operator/config/samples (vLLM RayService): bash -c in the head.
    "ray-rayservice": f"""\
apiVersion: ray.io/v1
kind: RayService
metadata: {{name: rs}}
spec:
  rayClusterConfig:
    headGroupSpec:
      template:
        spec:
          containers:
            - name: ray-head
              image: rayproject/ray-ml:2.40.0
              command: ["/bin/bash", "-c"]
              args:
                - |
                  ray start --head --port=6379
                  vllm serve m \\
                    {F}
    workerGroupSpecs:
      - groupName: gpu
        template:
          spec:
            containers:
              - name: ray-worker
                image: rayproject/ray-ml:2.40.0
""",
    # vllm-project/aibrix samples/disaggregation: StormService roles with templates.
    "aibrix-stormservice": f"""\
apiVersion: orchestration.aibrix.ai/v1alpha1
kind: StormService
metadata: {{name: ss}}
spec:
  template:
    spec:
      roles:
        - name: prefill
          template:
            spec:
              containers:
                - name: prefill
                  image: aibrix/vllm-openai:aibrix-kvcache-v0.8.5-20250520
                  command: ["sh", "-c"]
                  args:
                    - |
                      python3 -m vllm.entrypoints.openai.api_server --model m {F}
""",
    # kubeai-project/kubeai manifests/models: a Model with engine VLLM and args.
    "kubeai-model": f"""\
apiVersion: kubeai.org/v1
kind: Model
metadata: {{name: qwen}}
spec:
  features: [TextGeneration]
  url: hf://Qwen/Qwen2.5-0.5B-Instruct
  engine: VLLM
  args:
    - --max-model-len=2048
    - {F}
""",
    # `kubectl get -o yaml` of several objects: kind List.
    "kind-list": f"""\
apiVersion: v1
kind: List
items:
  - apiVersion: v1
    kind: Pod
    metadata: {{name: p}}
    spec:
      containers:
        - name: vllm
          image: vllm/vllm-openai:v0.20.0
          args: [m, {F}]
""",
    # kubernetes-sigs/kustomize examples/patchMultipleObjects: a patch naming only args.
    "kustomize-args-patch": f"""\
apiVersion: apps/v1
kind: Deployment
metadata: {{name: vllm}}
spec:
  template:
    spec:
      containers:
        - name: vllm
          args:
            - m
            - {F}
""",
    # kubernetes-sigs/kustomize examples/inlinePatch.md: a patch written in kustomization.yaml.
    "kustomize-inline-patch": f"""\
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources: [../base]
patches:
  - target: {{kind: Deployment, name: vllm}}
    patch: |-
      apiVersion: apps/v1
      kind: Deployment
      metadata:
        name: vllm
      spec:
        template:
          spec:
            containers:
              - name: vllm
                args: ["m", "{F}"]
""",
    # A string where a list belongs (Helm values of several charts): split as a shell line.
    "command-as-string": f"""\
apiVersion: v1
kind: Pod
metadata: {{name: p}}
spec:
  containers:
    - name: c
      image: python:3.12
      command: "vllm serve m --port 8000 {F}"
""",
    # llm-d-incubation/llm-d-modelservice values: decode containers with modelCommand.
    "llm-d-modelservice-values": f"""\
modelArtifacts:
  uri: hf://Qwen/Qwen3-0.6B
  name: Qwen/Qwen3-0.6B
decode:
  replicas: 1
  containers:
    - name: vllm
      image: ghcr.io/llm-d/llm-d-cuda:v0.3.0
      modelCommand: vllmServe
      args:
        - {F}
""",
    # ray-project/kuberay ray-operator/config/samples/vllm-serve-llm: Ray Serve LLM apps.
    "ray-serve-llm": f"""\
apiVersion: ray.io/v1
kind: RayService
metadata: {{name: llm}}
spec:
  serveConfigV2: |
    applications:
    - name: llms
      import_path: ray.serve.llm:build_openai_app
      route_prefix: "/"
      args:
        llm_configs:
        - model_loading_config:
            model_id: qwen
            model_source: Qwen/Qwen2.5-7B-Instruct
          engine_kwargs:
            tensor_parallel_size: 2
            {F[2:].replace("-", "_")}: true
  rayClusterConfig:
    headGroupSpec:
      template:
        spec:
          containers:
            - name: ray-head
              image: rayproject/ray-llm:2.46.0-py311-cu124
""",
    # ray-project/kuberay ray-operator/config/samples/ray-job.*.yaml: the entrypoint command.
    "ray-rayjob-entrypoint": f"""\
apiVersion: ray.io/v1
kind: RayJob
metadata: {{name: job}}
spec:
  entrypoint: >-
    vllm serve m --tensor-parallel-size 2
    {F}
  rayClusterSpec:
    headGroupSpec:
      template:
        spec:
          containers:
            - name: ray-head
              image: rayproject/ray:2.46.0
""",
    # vllm-project/production-stack operator/config/samples: VLLMRuntime.
    "production-stack-vllmruntime": f"""\
apiVersion: production-stack.vllm.ai/v1alpha1
kind: VLLMRuntime
metadata: {{name: vr}}
spec:
  model:
    modelURL: "meta-llama/Llama-3.1-8B-Instruct"
    maxModelLen: 4096
  vllmConfig:
    enablePrefixCaching: true
    tensorParallelSize: 1
    extraArgs: ["{F}"]
    v1: true
    port: 8000
  lmCacheConfig:
    enabled: true
    cpuOffloadingBufferSize: "15"
  deploymentConfig:
    image: {{registry: docker.io, name: "lmcache/vllm-openai:2025-05-27-v1"}}
""",
    # kserve/website docs/modelserving/v1beta1/llm/huggingface (and kserve/kserve
    # config/runtimes/kserve-huggingfaceserver.yaml): predictor.model on the huggingface
    # format, the runtime's own options beside vLLM's engine options.
    "kserve-huggingface-runtime": f"""\
apiVersion: serving.kserve.io/v1beta1
kind: InferenceService
metadata: {{name: huggingface-qwen}}
spec:
  predictor:
    model:
      modelFormat:
        name: huggingface
      args:
        - --model_name=qwen
        - --model_id=Qwen/Qwen2.5-1.5B-Instruct
        - --max_length=4096
        - --enforce-eager
        - {F}
      resources:
        limits: {{cpu: "6", memory: 24Gi, nvidia.com/gpu: "1"}}
""",
    # kserve/kserve config/runtimes/kserve-huggingfaceserver.yaml: a ServingRuntime on
    # the runtime's image, args only.
    "kserve-huggingfaceserver-servingruntime": f"""\
apiVersion: serving.kserve.io/v1alpha1
kind: ServingRuntime
metadata: {{name: hf-vllm}}
spec:
  supportedModelFormats: [{{name: huggingface, version: "1", autoSelect: true}}]
  containers:
    - name: kserve-container
      image: kserve/huggingfaceserver:v0.15.0
      args:
        - --model_name={{{{.Name}}}}
        - --gpu-memory-utilization=0.9
        - {F}
""",
    # ray-project/kuberay ray-operator/config/samples/vllm/ray-service.vllm.yaml: a
    # user-code app; here its config also carries engine kwargs, which are read.
    "ray-serve-user-code-kwargs": f"""\
apiVersion: ray.io/v1
kind: RayService
metadata: {{name: llama}}
spec:
  serveConfigV2: |
    applications:
    - name: llm
      route_prefix: /
      import_path: serve:model
      args:
        engine_kwargs:
          tensor_parallel_size: 2
          {F[2:].replace("-", "_")}: true
      runtime_env:
        env_vars:
          MODEL_ID: "meta-llama/Meta-Llama-3-8B-Instruct"
          PYTHONHASHSEED: "0"
  rayClusterConfig:
    headGroupSpec:
      template:
        spec:
          containers:
          - name: ray-head
            image: rayproject/ray-ml:2.33.0-py311
""",
    # kaito-project/kaito: the StatefulSet its controller writes for a vLLM preset
    # (docs' `kubectl describe` output and pkg/... tests: /bin/sh -c with KAITO's wrapper,
    # vLLM flags and KAITO's own --kaito-* options).
    "kaito-inference-api": f"""\
apiVersion: apps/v1
kind: StatefulSet
metadata: {{name: phi-4}}
spec:
  template:
    spec:
      containers:
        - name: phi-4
          image: mcr.microsoft.com/aks/kaito/kaito-base:0.4.2
          command:
            - /bin/sh
            - -c
            - python3 /workspace/vllm/inference_api.py --served-model-name=phi-4
              --model=microsoft/phi-4 --gpu-memory-utilization=0.84
              --kaito-config-file=/mnt/config/inference_config.yaml
              {F}
""",
    # Args only on llm-d's image: its entrypoint is the api_server module.
    "llm-d-image-args-only": f"""\
apiVersion: apps/v1
kind: Deployment
metadata: {{name: d}}
spec:
  template:
    spec:
      containers:
        - name: decode
          image: ghcr.io/llm-d/llm-d-cuda:v0.9.0
          args: ["--model", "m", "{F}"]
""",
    # kserve/kserve config/runtimes/kserve-huggingfaceserver-multinode.yaml: the head
    # container's `bash -c` script starts Ray, then `python -m huggingfaceserver ... $0 $@`
    # with the runtime's args as the script's arguments; the worker only joins Ray.
    "kserve-huggingfaceserver-multinode": f"""\
apiVersion: serving.kserve.io/v1alpha1
kind: ClusterServingRuntime
metadata:
  name: hf-multinode
spec:
  supportedModelFormats:
    - name: huggingface
      autoSelect: true
  containers:
    - name: kserve-container
      image: kserve/huggingfaceserver:v0.15.0-gpu
      command:
      - "bash"
      - "-c"
      - |
        export RAY_ADDRESS=${{POD_IP}}:${{RAY_PORT}}
        ray start --head --disable-usage-stats --include-dashboard false
        python -m huggingfaceserver --model_dir=/mnt/models \\
          --tensor-parallel-size=2 {F} $0 $@
      args:
      - --model_name={{{{.Name}}}}
      - --max_length=4096
      env:
        - name: RAY_PORT
          value: "6379"
  workerSpec:
    tensorParallelSize: 1
    containers:
      - name: worker-container
        image: kserve/huggingfaceserver:v0.15.0-gpu
        command:
        - "bash"
        - "-c"
        - |
          ray start --address="${{HEAD_SVC}}:6379" --block
""",
    # ai-dynamo/dynamo examples/backends/vllm/deploy/agg_lmcache.yaml: a
    # DynamoGraphDeployment worker's extraPodSpec.mainContainer runs `sh -c 'exec python3
    # -m dynamo.vllm "$@" ...' --` and its args are the script's "$@".
    "dynamo-main-container-sh-c-args": f"""\
apiVersion: nvidia.com/v1alpha1
kind: DynamoGraphDeployment
metadata:
  name: agg
spec:
  services:
    Frontend:
      componentType: frontend
      extraPodSpec:
        mainContainer:
          image: nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.0.0
          command: [python3, -m, dynamo.frontend, --http-port, "8000"]
    VllmDecodeWorker:
      componentType: worker
      extraPodSpec:
        mainContainer:
          image: nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.0.0
          command:
            - /bin/sh
            - -c
            - exec python3 -m dynamo.vllm "$@" --connector none
            - --
          args:
            - --model
            - Qwen/Qwen3-0.6B
            - --disaggregation-mode
            - decode
            - {F}
""",
    # vllm-project/aibrix brixbench/benchmark/testdata/deployments/dynamo/*.yaml: the worker
    # script is the block-scalar `args` of `command: [/bin/sh, -c]`, Dynamo's own options
    # mixed with vLLM's.
    "dynamo-worker-block-script": f"""\
apiVersion: nvidia.com/v1alpha1
kind: DynamoGraphDeployment
metadata:
  name: disagg
spec:
  backendFramework: vllm
  services:
    VllmPrefillWorker:
      componentType: worker
      subComponentType: prefill
      extraPodSpec:
        mainContainer:
          image: registry.example/aibrix/ai-dynamo-vllm-runtime:1.2.0
          command:
            - /bin/sh
            - -c
          args:
            - |
              export MODEL=Qwen3-8B
              python3 -m dynamo.vllm \\
                --model /models/$MODEL \\
                --disaggregation-mode prefill \\
                --is-prefill-worker \\
                --namespace vllm-dynamo \\
                --output-modalities text \\
                {F} \\
                --tensor-parallel-size 2
""",
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_removed_flag_found_at_its_line(tmp_path: Path, shape: str) -> None:
    text = SHAPES[shape]
    written = F[2:].replace("-", "_") if shape.startswith("ray-serve") else F
    assert removed_in_text(tmp_path, f"{shape}.yaml", text) == [
        (f"{shape}.yaml", line_of(text, written))
    ]


def test_dynamo_worker_options_are_dropped_before_vllm_reads_the_rest() -> None:
    """Dynamo's own options (rules/dynamo/worker_options.json) and their values never
    reach vLLM's parser; the worker is a vLLM engine, said in a note."""
    (worker,) = read_text(SHAPES["dynamo-worker-block-script"], "g.yaml")
    assert [t.text for t in worker.tokens] == [
        "--model", "/models/Qwen3-8B", F, "--tensor-parallel-size", "2",
    ]  # fmt: skip
    assert worker.image is not None and worker.image.endswith(":1.2.0")
    assert any("NVIDIA Dynamo vLLM worker" in note for note in worker.notes)
    (agg,) = read_text(SHAPES["dynamo-main-container-sh-c-args"], "agg.yaml")
    assert [t.text for t in agg.tokens] == ["--model", "Qwen/Qwen3-0.6B", F]
    assert "VllmDecodeWorker" in agg.label


def test_dynamo_options_are_never_reported_as_unknown_vllm_flags(tmp_path: Path) -> None:
    text = SHAPES["dynamo-worker-block-script"]
    (tmp_path / "g.yaml").write_text(text)
    found = read_input_set([tmp_path / "g.yaml"])
    report = Auditor(ShippedTables(), normalize, AuditSettings()).run(found.invocations)
    assert not [f for f in report.findings if f.name == "unknown-flag"]
    with_typo = text.replace("--tensor-parallel-size 2", "--tensor-paralel-size 2")
    (tmp_path / "g.yaml").write_text(with_typo)
    found = read_input_set([tmp_path / "g.yaml"])
    report = Auditor(ShippedTables(), normalize, AuditSettings()).run(found.invocations)
    assert [f.name for f in report.findings if f.name == "unknown-flag"] == ["unknown-flag"]


def test_dynamo_runtime_tag_is_not_a_vllm_version() -> None:
    (worker,) = read_text(SHAPES["dynamo-worker-block-script"], "g.yaml")
    assert worker.image is not None
    assert version_from_image(worker.image) is None


def test_huggingfaceserver_in_a_script_maps_its_options_to_vllm() -> None:
    (head,) = read_text(SHAPES["kserve-huggingfaceserver-multinode"], "rt.yaml")
    assert [t.text for t in head.tokens] == [
        "/mnt/models", "--tensor-parallel-size=2", F, "--max-model-len", "4096",
    ]  # fmt: skip
    assert "kserve-container" in head.label
    script = "#!/bin/sh\npython3 -m huggingfaceserver --model_id org/m --model_name m\n"
    (served,) = read_text(script, "start.sh")
    assert [t.text for t in served.tokens] == ["org/m"]
    other = script.replace("--model_name m", "--backend=huggingface")
    with pytest.raises(NoServerCommand):
        read_text(other, "start.sh")


def test_preset_only_kaito_workspace_is_skipped_with_its_reason(tmp_path: Path) -> None:
    """kaito-project/kaito examples/inference/kaito_inferenceset_phi_4_mini.yaml: an
    InferenceSet naming only a preset kvtool's KAITO table does not know; its vLLM
    command is generated by the controller (known presets: test_kaito_presets.py)."""
    text = (
        "apiVersion: kaito.sh/v1alpha1\nkind: InferenceSet\nmetadata:\n  name: phi\n"
        "spec:\n  replicas: 1\n  template:\n    inference:\n      preset:\n"
        "        name: acme-chat-13b\n    resource:\n"
        "      instanceType: Standard_NC24ads_A100_v4\n"
    )
    path = tmp_path / "inferenceset.yaml"
    path.write_text(text)
    found = read_input_set([path])
    assert not found.invocations
    (skipped,) = found.skipped
    assert "preset-only KAITO workspace" in skipped.reason
    assert "acme-chat-13b" in skipped.reason
    assert not skipped.problem
    other = text.replace("kaito.sh/v1alpha1", "example.com/v1")
    (path.parent / "other.yaml").write_text(other)
    (elsewhere,) = read_input_set([path.parent / "other.yaml"]).skipped
    assert "KAITO" not in elsewhere.reason


def test_what_kvtool_launch_writes_is_found(tmp_path: Path, kvtool_cli) -> None:  # type: ignore[no-untyped-def]
    result = kvtool_cli(
        "launch", "native-cpu-offload", "--model", "qwen3-8b", "--target", "k8s",
        "--host-ram-gib", "64", "--vllm-version", "0.27.1", "--", F,
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    text = result.stdout
    # The header comment records the command (flag included); the finding is on the args.
    assert text.splitlines()[line_of(text, F) - 1].startswith("# Generated by")
    assert removed_in_text(tmp_path, "launch.yaml", text) == [("launch.yaml", line_of(text, F, 2))]


def test_images_without_a_vllm_entrypoint_give_nothing() -> None:
    text = SHAPES["llm-d-image-args-only"].replace("ghcr.io/llm-d/llm-d-cuda:v0.9.0", "redis:7")
    with pytest.raises(NoServerCommand, match="no vLLM server command found"):
        read_text(text, "redis.yaml")


def test_llm_d_tag_is_not_a_vllm_version() -> None:
    (invocation,) = read_text(SHAPES["llm-d-image-args-only"], "d.yaml")
    assert invocation.image == "ghcr.io/llm-d/llm-d-cuda:v0.9.0"
    # llm-d's v0.9.0 is no vLLM 0.9.0: the vLLM its release notes say it bundles
    assert version_from_image(invocation.image) == "0.26.0"


CONFIGMAP = """\
apiVersion: v1
kind: ConfigMap
metadata: {name: vllm-env}
data:
  PYTHONHASHSEED: "0"
  LMCACHE_MAX_LOCAL_CPU_SIZE: "40"
"""

CONSUMER = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: d}
spec:
  template:
    spec:
      containers:
        - name: vllm
          image: vllm/vllm-openai:v0.20.0
          args: [m]
          envFrom:
            - configMapRef: {name: vllm-env}
          env:
            - name: HASH
              valueFrom:
                configMapKeyRef: {name: vllm-env, key: PYTHONHASHSEED}
"""


def test_envfrom_and_valuefrom_read_configmaps_of_other_files(tmp_path: Path) -> None:
    (tmp_path / "cm.yaml").write_text(CONFIGMAP)
    (tmp_path / "deploy.yaml").write_text(CONSUMER)
    found = read_input_set([tmp_path])
    (invocation,) = found.invocations
    env = {e.name: (e.value, e.location.line if e.location else None) for e in invocation.env}
    assert env["PYTHONHASHSEED"] == ("0", 5)  # where the ConfigMap wrote it
    assert env["LMCACHE_MAX_LOCAL_CPU_SIZE"] == ("40", 6)
    assert env["HASH"][0] == "0"
    assert not any("envFrom" in note for note in invocation.notes)
    # Without the ConfigMap in the input set, the gap is said, not guessed.
    (alone,) = read_input_set([tmp_path / "deploy.yaml"]).invocations
    assert any("ConfigMap vllm-env is not in the input" in note for note in alone.notes)


def test_duplicate_keys_last_wins_and_are_reported(tmp_path: Path) -> None:
    text = f"""\
apiVersion: v1
kind: Pod
metadata: {{name: p}}
spec:
  containers:
    - name: vllm
      image: vllm/vllm-openai:v0.20.0
      args: [m]
      args: [m, {F}]
"""
    assert removed_in_text(tmp_path, "dup.yaml", text) == [("dup.yaml", 9)]
    (invocation,) = read_text(text, "dup.yaml")
    assert any("'args' is written twice (first at line 8)" in n for n in invocation.notes)


def test_byte_order_mark_is_handled(tmp_path: Path) -> None:
    text = SHAPES["deployment-flow-list"]
    path = tmp_path / "bom.yaml"
    path.write_bytes(b"\xef\xbb\xbf" + text.encode())
    assert removed_at(read_input_set([path])) == [("bom.yaml", line_of(text, F))]


def test_rendered_helm_output_on_stdin_names_its_template() -> None:
    text = (
        "---\n# Source: vllm-stack/templates/deployment-vllm-multi.yaml\n"
        + SHAPES["deployment-block-lists"]
    )
    assert removed_in_stdin(text, "rendered.yaml") == [("rendered.yaml", line_of(text, F))]
    (invocation,) = read_input_set([], stdin=StdinInput(text, "rendered.yaml")).invocations
    assert "from vllm-stack/templates/deployment-vllm-multi.yaml" in invocation.label


@pytest.mark.timeout(20)
def test_an_alias_inside_itself_ends(tmp_path: Path) -> None:
    # YAML lets an anchored node contain its own alias; the reader must not loop on it.
    # Kubernetes' decoder refuses such a document, so kvtool reports the file as one
    # unreadable line (which fails the run) instead of auditing a shape no cluster takes.
    looped = "    spec: &pod\n      loop: *pod\n      containers:"
    text = SHAPES["deployment-flow-list"].replace("    spec:\n      containers:", looped)
    assert "*pod" in text
    path = tmp_path / "loop.yaml"
    path.write_text(text, encoding="utf-8")
    found = read_input_set([path])
    assert found.invocations == []
    assert [(s.file, s.problem) for s in found.skipped] == [(str(path), True)]
    assert "alias refers to a node that contains it" in found.skipped[0].reason


def test_kserve_huggingface_args_become_vllm_engine_words() -> None:
    (invocation,) = read_text(SHAPES["kserve-huggingface-runtime"], "isvc.yaml")
    words = [t.text for t in invocation.tokens]
    # --model_id is the model; --max_length sets --max-model-len; --model_name is KServe's.
    assert words == ["Qwen/Qwen2.5-1.5B-Instruct", "--max-model-len", "4096", "--enforce-eager", F]
    assert any("parse_known_args" in note for note in invocation.notes)


def test_kserve_huggingface_model_dir_default_and_other_backends() -> None:
    text = (
        SHAPES["kserve-huggingface-runtime"]
        .replace(
            "        - --model_id=Qwen/Qwen2.5-1.5B-Instruct\n",
            "",
        )
        .replace(
            "      resources:",
            "      storageUri: hf://Qwen/Qwen2.5-1.5B-Instruct\n      resources:",
        )
    )
    (invocation,) = read_text(text, "isvc.yaml")
    model = invocation.tokens[0]
    assert model.text == "/mnt/models"  # where KServe downloads storageUri
    assert model.location is not None and model.location.line == line_of(text, "storageUri")
    hf_backend = text.replace("- --enforce-eager", "- --backend=huggingface")
    with pytest.raises(NoServerCommand):
        read_text(hf_backend, "isvc.yaml")


def test_ray_user_code_app_reads_env_and_is_skipped_without_engine_arguments(
    tmp_path: Path,
) -> None:
    text = SHAPES["ray-serve-user-code-kwargs"]
    (invocation,) = read_text(text, "rs.yaml")
    env = {e.name: (e.value, e.location.line if e.location else None) for e in invocation.env}
    assert env["PYTHONHASHSEED"] == ("0", line_of(text, "PYTHONHASHSEED"))
    assert any("user code (serve:model)" in note for note in invocation.notes)
    bare = "\n".join(
        line for line in text.splitlines() if "kwargs" not in line and "_size" not in line
        and F[2:].replace("-", "_") not in line and "      args:" not in line
    ) + "\n"  # fmt: skip
    path = tmp_path / "rs.yaml"
    path.write_text(bare)
    found = read_input_set([path])
    assert found.invocations == []
    (skipped,) = found.skipped
    assert "user code" in skipped.reason and "serve:model" in skipped.reason
    assert not skipped.problem


def test_kaito_wrapper_options_are_not_vllm_arguments() -> None:
    (invocation,) = read_text(SHAPES["kaito-inference-api"], "sts.yaml")
    assert [t.text for t in invocation.tokens] == [
        "--served-model-name=phi-4", "--model=microsoft/phi-4",
        "--gpu-memory-utilization=0.84", F,
    ]  # fmt: skip
    assert version_from_image(invocation.image or "") == "0.22.1"  # kaito-base 0.4.x, cited


def test_ray_serve_llm_runtime_env_is_the_server_environment() -> None:
    # Ray Serve LLM's LLMConfig takes a runtime_env (docs.ray.io serve/llm), as apps do.
    text = SHAPES["ray-serve-llm"].replace(
        "          engine_kwargs:\n",
        "          runtime_env:\n            env_vars: {PYTHONHASHSEED: '0'}\n"
        "          engine_kwargs:\n",
    )
    (invocation,) = read_text(text, "rs.yaml")
    (env,) = invocation.env
    assert (env.name, env.value) == ("PYTHONHASHSEED", "0")
    assert env.location is not None and env.location.line == line_of(text, "PYTHONHASHSEED")
