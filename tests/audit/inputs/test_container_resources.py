"""The Kubernetes reader carries the container's memory, its mounts and hostIPC.

Shapes: vLLM's Kubernetes guide mounts a ``medium: Memory`` emptyDir at /dev/shm with a
``sizeLimit`` and sets ``resources.limits.memory``
(https://github.com/vllm-project/vllm/blob/v0.32.0/docs/deployment/k8s.md); KServe's
``predictor`` carries ``volumes`` next to ``model``
(https://kserve.github.io/website/docs/model-serving/predictive-inference/frameworks/huggingface/).
"""

from __future__ import annotations

import pytest

from kvtool.audit.inputs import read_argv, read_text
from kvtool.audit.inputs.quantity import parse_bytes, parse_docker_bytes

DEPLOYMENT = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: vllm}
spec:
  template:
    spec:
      containers:
        - name: vllm
          image: vllm/vllm-openai:v0.32.0
          command: ["vllm", "serve", "m", "-tp", "2"]
          resources:
            limits:
              memory: 200Gi
            requests:
              memory: 128974848000m
          volumeMounts:
            - name: shm
              mountPath: /dev/shm
            - name: cache
              mountPath: /root/.cache
      volumes:
        - name: cache
          persistentVolumeClaim: {claimName: models}
        - name: shm
          emptyDir:
            medium: Memory
            sizeLimit: "2Gi"
"""


def _line(text: str, needle: str) -> int:
    return next(n for n, line in enumerate(text.splitlines(), 1) if needle in line)


def test_deployment_memory_and_dev_shm_volume_with_their_lines() -> None:
    (invocation,) = read_text(DEPLOYMENT, "deploy.yaml")
    resources = invocation.resources
    assert resources is not None and resources.host_ipc is None
    assert resources.memory_limit is not None and resources.memory_limit.bytes == 200 << 30
    assert resources.memory_limit.location is not None
    assert resources.memory_limit.location.line == _line(DEPLOYMENT, "memory: 200Gi")
    # 128974848000m is 128974848 bytes (Kubernetes' own example of the milli suffix).
    assert resources.memory_request is not None
    assert resources.memory_request.bytes == 128974848
    shm = resources.mount_at("/dev/shm/")
    assert shm is not None and (shm.source, shm.medium, shm.volume) == ("emptyDir", "Memory", "shm")
    assert shm.size_limit is not None and shm.size_limit.bytes == 2 << 30
    assert shm.location is not None and shm.location.line == _line(DEPLOYMENT, "/dev/shm")
    cache = resources.mount_at("/root/.cache")
    assert cache is not None and cache.source == "persistentVolumeClaim" and cache.medium is None


def test_kserve_predictor_volumes_and_host_ipc() -> None:
    text = """\
apiVersion: serving.kserve.io/v1beta1
kind: InferenceService
metadata: {name: llm}
spec:
  predictor:
    hostIPC: true
    model:
      modelFormat: {name: huggingface}
      image: vllm/vllm-openai:v0.32.0
      command: ["vllm", "serve", "m"]
      resources: {limits: {memory: 64G}}
      volumeMounts: [{name: dshm, mountPath: /dev/shm}]
    volumes:
      - name: dshm
        emptyDir: {medium: Memory}
"""
    (invocation,) = read_text(text, "isvc.yaml")
    resources = invocation.resources
    assert resources is not None and resources.host_ipc is not None
    assert resources.memory_limit is not None and resources.memory_limit.bytes == 64 * 10**9
    shm = resources.mount_at("/dev/shm")
    assert shm is not None and shm.medium == "Memory" and shm.size_limit is None


def test_a_patch_without_an_image_carries_no_resources() -> None:
    # A kustomize patch that only sets args says nothing about the pod's volumes.
    text = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: vllm}
spec:
  template:
    spec:
      containers:
        - name: vllm
          args: ["--model", "m", "-tp", "2"]
"""
    (invocation,) = read_text(text, "patch.yaml")
    assert invocation.resources is None


def test_a_bad_quantity_is_a_note_not_a_value() -> None:
    text = DEPLOYMENT.replace("memory: 200Gi", "memory: 200GB")
    (invocation,) = read_text(text, "deploy.yaml")
    assert invocation.resources is not None and invocation.resources.memory_limit is None
    assert any("'200GB' is not a Kubernetes quantity" in note for note in invocation.notes)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # https://kubernetes.io/docs/reference/kubernetes-api/common-definitions/quantity/
        ("64Mi", 64 * 2**20),
        ("1Ti", 2**40),
        ("1.5Gi", 3 * 2**29),
        ("500M", 500 * 10**6),
        ("2k", 2000),
        ("1e9", 10**9),
        ("12E-1", 2),  # 1.2 bytes, rounded up as Quantity.Value() rounds
        ("1E", 10**18),
        ("128974848", 128974848),
        ("129e6", 129 * 10**6),
        ("123Mi", 123 * 2**20),
        ("0.1Gi", 107374183),  # 107374182.4 bytes: exact decimal arithmetic, rounded up
        ("+.5k", 500),
    ],
)
def test_kubernetes_quantities(text: str, expected: int) -> None:
    assert parse_bytes(text) == expected


@pytest.mark.parametrize("text", ["", "Gi", "1GB", "1 Gi", "-1Gi", "1e99999", "1.2.3", "1gi"])
def test_not_quantities(text: str) -> None:
    assert parse_bytes(text) is None


def test_compose_service_memory_shm_size_and_ipc() -> None:
    # Compose spec services: mem_limit / deploy.resources.limits.memory, shm_size, ipc
    # (https://github.com/compose-spec/compose-spec/blob/master/05-services.md).
    text = """\
services:
  engine:
    image: vllm/vllm-openai:v0.32.0
    command: ["--model", "m", "-tp", "2"]
    shm_size: 16gb
    deploy:
      resources:
        limits:
          memory: 96g
  host:
    image: vllm/vllm-openai:v0.32.0
    command: ["--model", "m"]
    ipc: host
    mem_limit: 1.5GiB
"""
    engine, host = read_text(text, "compose.yaml")
    assert engine.resources is not None and host.resources is not None
    assert engine.resources.shm_size is not None and engine.resources.shm_size.bytes == 16 << 30
    assert engine.resources.memory_limit is not None
    assert engine.resources.memory_limit.bytes == 96 << 30
    assert engine.resources.host_ipc is None
    assert host.resources.host_ipc is not None and host.resources.shm_size is None
    assert host.resources.memory_limit is not None
    assert host.resources.memory_limit.bytes == 3 << 29


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # go-units RAMInBytes (https://github.com/docker/go-units/blob/v0.5.0/size.go):
        # binary multiples, optional i/b, one optional space.
        ("16gb", 16 << 30),
        ("2g", 2 << 30),
        ("64m", 64 << 20),
        ("1024", 1024),
        ("1.5GiB", 3 << 29),
        ("10 GB", 10 << 30),
        ("512k", 512 << 10),
    ],
)
def test_docker_sizes(text: str, expected: int) -> None:
    assert parse_docker_bytes(text) == expected


@pytest.mark.parametrize("text", ["", "g", "1x", "1..2g", "1.2.3g", "-1g", "1  g"])
def test_not_docker_sizes(text: str) -> None:
    assert parse_docker_bytes(text) is None


def test_docker_run_sizing_options_in_a_script() -> None:
    # vLLM's Docker guide runs the image with --ipc=host; --shm-size and -m/--memory size
    # /dev/shm and the memory limit (https://docs.docker.com/reference/cli/docker/container/run/).
    text = """\
docker run --gpus all -m 100g --shm-size=2g vllm/vllm-openai:v0.32.0 --model m -tp 2
docker run --gpus all --ipc host vllm/vllm-openai:v0.32.0 --model m
vllm serve m -tp 2
"""
    sized, host, bare = read_text(text, "run.sh")
    assert sized.resources is not None and host.resources is not None
    assert sized.resources.memory_limit is not None
    assert sized.resources.memory_limit.bytes == 100 << 30
    assert sized.resources.shm_size is not None and sized.resources.shm_size.bytes == 2 << 30
    assert sized.resources.shm_size.location is not None
    assert sized.resources.shm_size.location.line == 1
    assert host.resources.host_ipc is not None and host.resources.shm_size is None
    assert bare.resources is None  # not a container: nothing to say about /dev/shm


def test_docker_run_in_argv() -> None:
    invocation = read_argv(
        ["docker", "run", "--shm-size", "1g", "--ipc=private", "vllm/vllm-openai:v0.32.0", "m"]
    )
    assert invocation.resources is not None and invocation.resources.host_ipc is None
    assert invocation.resources.shm_size is not None
    assert invocation.resources.shm_size.bytes == 1 << 30
    assert read_argv(["vllm", "serve", "m"]).resources is None


@pytest.mark.parametrize(
    "text",
    [
        # A bare Pod: the PodSpec is the document's spec.
        """\
apiVersion: v1
kind: Pod
metadata: {name: p}
spec:
  containers:
    - {name: vllm, image: vllm/vllm-openai:v0.32.0, command: [vllm, serve, m],
       volumeMounts: [{name: dshm, mountPath: /dev/shm}]}
  volumes: [{name: dshm, emptyDir: {medium: Memory, sizeLimit: 8Gi}}]
""",
        # kubernetes-sigs/lws docs/examples/vllm: leaderTemplate / workerTemplate PodSpecs.
        """\
apiVersion: leaderworkerset.x-k8s.io/v1
kind: LeaderWorkerSet
metadata: {name: lws}
spec:
  leaderWorkerTemplate:
    leaderTemplate:
      spec:
        containers:
          - name: vllm-leader
            image: vllm/vllm-openai:v0.32.0
            command: [vllm, serve, m]
            volumeMounts: [{name: dshm, mountPath: /dev/shm}]
        volumes: [{name: dshm, emptyDir: {medium: Memory, sizeLimit: 8Gi}}]
""",
    ],
)
def test_the_pod_spec_is_found_next_to_its_container(text: str) -> None:
    (invocation,) = read_text(text, "pod.yaml")
    assert invocation.resources is not None
    shm = invocation.resources.mount_at("/dev/shm")
    assert shm is not None and shm.size_limit is not None and shm.size_limit.bytes == 8 << 30


def test_the_pods_other_containers_are_carried_by_their_words() -> None:
    text = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: engine}
spec:
  template:
    spec:
      containers:
        - name: vllm
          image: vllm/vllm-openai:v0.32.0
          command: [vllm, serve, m, --kv-offloading-backend, lmcache]
        - name: lmcache
          image: lmcache/standalone:latest
          command: ["/bin/sh", "-c"]
          args: ["lmcache server --l1-size-gb 60 --chunk-size 1088"]
"""
    (invocation,) = read_text(text, "deploy.yaml")
    (sidecar,) = invocation.pod_containers
    assert sidecar.name == "lmcache" and sidecar.location is not None
    assert sidecar.location.line == _line(text, "name: lmcache")
    script = sidecar.argv[-1]
    assert script.text == "lmcache server --l1-size-gb 60 --chunk-size 1088"
    assert script.location is not None and script.location.line == _line(text, "args:")
