"""A script's starting environment: SkyPilot's task ``envs`` and its own run-time
variables, a container's ``env`` for its ``sh -c``; not a compose service's.

Shapes: skypilot-org/skypilot llm/vllm/vllm-multinode.sky.yaml (``vllm serve $MODEL_NAME
--tensor-parallel-size $SKYPILOT_NUM_GPUS_PER_NODE --pipeline-parallel-size
$SKYPILOT_NUM_NODES`` with ``accelerators: H100:8`` and ``num_nodes: 2``), variables
documented at https://docs.skypilot.co/en/latest/running-jobs/environment-variables.html.
"""

from __future__ import annotations

from pathlib import Path

from kvtool.audit.inputs import read_input_set
from tests.audit.inputs.removed_flag import REMOVED, line_of, removed_in_text

F = REMOVED

TASK = f"""\
envs:
  MODEL_NAME: meta-llama/Llama-3.1-70B-Instruct
resources:
  accelerators: H100:8
  ports: 8081
num_nodes: 2
run: |
  if [ "$SKYPILOT_NODE_RANK" == "0" ]; then
    vllm serve $MODEL_NAME \\
      --tensor-parallel-size $SKYPILOT_NUM_GPUS_PER_NODE \\
      --pipeline-parallel-size $SKYPILOT_NUM_NODES \\
      {F}
  fi
"""


def _words(tmp_path: Path, name: str, text: str) -> list[str]:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    (invocation,) = read_input_set([path]).invocations
    return [t.text for t in invocation.tokens]


def test_skypilot_task_env_and_gpu_count_reach_the_command(tmp_path: Path) -> None:
    assert removed_in_text(tmp_path, "serve.sky.yaml", TASK) == [
        ("serve.sky.yaml", line_of(TASK, F))
    ]
    words = _words(tmp_path, "serve.sky.yaml", TASK)
    assert words[0] == "meta-llama/Llama-3.1-70B-Instruct"
    assert words[words.index("--tensor-parallel-size") + 1] == "8"
    assert words[words.index("--pipeline-parallel-size") + 1] == "2"


def test_skypilot_gpu_count_only_when_the_task_decides_it(tmp_path: Path) -> None:
    one_node = TASK.replace("num_nodes: 2\n", "").replace("H100:8", "L4")
    words = _words(tmp_path, "serve.sky.yaml", one_node)
    assert words[words.index("--tensor-parallel-size") + 1] == "1"
    assert words[words.index("--pipeline-parallel-size") + 1] == "1"
    either = TASK.replace("accelerators: H100:8", "accelerators: [H100:8, A100:4]")
    words = _words(tmp_path, "serve.sky.yaml", either)
    assert words[words.index("--tensor-parallel-size") + 1] == "$SKYPILOT_NUM_GPUS_PER_NODE"
    same = TASK.replace("accelerators: H100:8", "accelerators: {H100: 8, H200: 8}")
    words = _words(tmp_path, "serve.sky.yaml", same)
    assert words[words.index("--tensor-parallel-size") + 1] == "8"


POD = """\
apiVersion: v1
kind: Pod
metadata: {name: vllm}
spec:
  containers:
    - name: vllm
      image: vllm/vllm-openai:v0.20.0
      command: ["/bin/sh", "-c"]
      args: ["exec vllm serve $MODEL --tensor-parallel-size $TP"]
      env:
        - {name: MODEL, value: Qwen/Qwen3-8B}
        - name: TP
          valueFrom: {configMapKeyRef: {name: absent, key: tp}}
"""


def test_container_env_is_the_sh_c_scripts_environment(tmp_path: Path) -> None:
    words = _words(tmp_path, "pod.yaml", POD)
    assert words[0] == "Qwen/Qwen3-8B"
    assert words[words.index("--tensor-parallel-size") + 1] == "$TP"  # value unknown here


def test_compose_environment_is_not_the_files_substitution(tmp_path: Path) -> None:
    compose = (
        "services:\n  vllm:\n    image: vllm/vllm-openai:v0.20.0\n"
        "    environment:\n      MODEL: Qwen/Qwen3-8B\n"
        '    entrypoint: ["/bin/sh", "-c", "exec vllm serve $MODEL --enforce-eager"]\n'
    )
    # compose fills a single-$ $MODEL from the host's environment when it reads the file
    # (https://docs.docker.com/compose/how-tos/environment-variables/variable-interpolation/)
    words = _words(tmp_path, "compose.yaml", compose)
    assert words[0] != "Qwen/Qwen3-8B"
