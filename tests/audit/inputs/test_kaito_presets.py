"""KAITO Workspace/InferenceSet naming only a preset: the command KAITO's controller writes.

Shapes as kaito-project/kaito writes them (not copied): a v1beta1 Workspace with
``resource.count``/``instanceType`` and ``inference.preset.name`` plus ``inference.config``
naming a ConfigMap with ``inference_config.yaml`` (examples/inference/
kaito_workspace_llama-3.3_70b_instruct.yaml, kaito_workspace_custom_config.yaml), and a
v1alpha1 InferenceSet with the same under ``spec.template``
(examples/inference/kaito_inferenceset_phi_4_mini.yaml).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kvtool.audit.inputs import read_input_set, read_text
from kvtool.audit.inputs.kaito_preset import table
from kvtool.audit.model import Invocation
from tests.audit.inputs.removed_flag import REMOVED, line_of, removed_in_text

SETTING = REMOVED.removeprefix("--")
LARGE = "llama-3.3-70b-instruct"
SMALL = "phi-4-mini-instruct"
TWO_GPUS = "Standard_NC48ads_A100_v4"

CONFIGMAP = f"""\
apiVersion: v1
kind: ConfigMap
metadata:
  name: llama-inference-params
data:
  inference_config.yaml: |
    # Maximum number of steps to find the max available seq len fitting in the GPU memory.
    max_probe_steps: 6
    vllm:
      gpu-memory-utilization: 0.95
      max-model-len: 16384
      {SETTING}: true
"""

WORKSPACE = f"""\
apiVersion: kaito.sh/v1beta1
kind: Workspace
metadata:
  name: workspace-llama-3-3-70b-instruct
resource:
  count: 2
  instanceType: "{TWO_GPUS}"
  labelSelector:
    matchLabels:
      apps: llama-3-3-70b-instruct
inference:
  preset:
    name: {LARGE}
    presetOptions:
      modelAccessSecret: hf-token
  config: "llama-inference-params"
"""

INFERENCESET = f"""\
apiVersion: kaito.sh/v1alpha1
kind: InferenceSet
metadata:
  name: phi-4-mini
spec:
  replicas: 1
  template:
    inference:
      preset:
        accessMode: public
        name: {SMALL}
    resource:
      instanceType: {TWO_GPUS}
"""


def _options(invocation: Invocation) -> dict[str, tuple[str | None, int | None]]:
    """flag -> (value, line) of the argv words (a switch has no value)."""
    words = list(invocation.tokens)
    found: dict[str, tuple[str | None, int | None]] = {}
    for index, word in enumerate(words):
        if not word.text.startswith("--"):
            continue
        following = words[index + 1] if index + 1 < len(words) else None
        value = None if following is None or following.text.startswith("--") else following.text
        found[word.text] = (value, word.location.line if word.location else None)
    return found


def test_preset_only_workspace_is_the_command_kaito_generates() -> None:
    text = WORKSPACE.replace('  config: "llama-inference-params"\n', "")
    (invocation,) = read_text(text, "ws.yaml")
    options = _options(invocation)
    preset = table().presets[LARGE]
    instance = table().instance_types[TWO_GPUS]
    assert options["--model"] == (preset.model, line_of(text, f"name: {LARGE}"))
    # The words KAITO's preset generator gives the model, at the preset's line.
    assert preset.words and ("dtype", "bfloat16") in preset.words
    for flag, value in preset.words:
        assert options["--" + flag] == (value or None, line_of(text, f"name: {LARGE}"))
    assert options["--served-model-name"][0] == preset.served_model_name
    # The model outgrows half a GPU: tensor parallel over the node's GPUs, pipeline
    # parallel over resource.count nodes (KAITO's configureParallelism).
    assert preset.model_file_size_gib * instance.gpu_count * 2 >= instance.gpu_memory_gib
    assert options["--tensor-parallel-size"] == (
        str(instance.gpu_count),
        line_of(text, "instanceType:"),
    )
    assert options["--pipeline-parallel-size"] == ("2", line_of(text, "count: 2"))
    assert options["--max-model-len"][0] == "auto"
    assert "KAITO" in invocation.label and LARGE in invocation.label
    assert not invocation.config_items and not invocation.notes


def test_one_node_is_tensor_parallel_only() -> None:
    text = WORKSPACE.replace("  count: 2\n", "")
    (invocation,) = read_text(text, "ws.yaml")
    options = _options(invocation)
    assert "--pipeline-parallel-size" not in options
    assert options["--tensor-parallel-size"][0] == str(table().instance_types[TWO_GPUS].gpu_count)


def test_small_model_on_two_gpus_is_data_parallel_and_served_as_the_inferenceset() -> None:
    (invocation,) = read_text(INFERENCESET, "is.yaml")
    options = _options(invocation)
    preset = table().presets[SMALL]
    instance = table().instance_types[TWO_GPUS]
    assert preset.model_file_size_gib * instance.gpu_count * 2 < instance.gpu_memory_gib
    assert options["--data-parallel-size"][0] == str(instance.gpu_count)
    assert options["--tensor-parallel-size"][0] == "1"
    assert options["--served-model-name"][0] == "phi-4-mini"
    assert options["--model"] == (preset.model, line_of(INFERENCESET, f"name: {SMALL}"))


def test_referenced_configmap_joins_the_workspace_and_wins() -> None:
    text = CONFIGMAP + "---\n" + WORKSPACE
    (invocation,) = read_text(text, "ws.yaml")  # the ConfigMap is no invocation of its own
    items = {key: (value, where.line if where else None)
             for key, value, where in invocation.config_items}  # fmt: skip
    assert items["max-model-len"] == (16384, line_of(text, "max-model-len:"))
    assert items[SETTING] == (True, line_of(text, f"{SETTING}:"))
    assert invocation.settings["max_probe_steps"][0] == 6
    # The wrapper appends the file's keys after its own: the generated ones give way.
    options = _options(invocation)
    assert "--max-model-len" not in options and "--gpu-memory-utilization" not in options
    assert "--model" in options
    # Either spelling of a key replaces the generated word (--load_format here).
    underscored = text.replace("max-model-len: 16384", "load-format: safetensors")
    (other,) = read_text(underscored, "ws.yaml")
    assert "--load_format" not in _options(other) and "--max-model-len" in _options(other)


def test_removed_flag_in_the_configmap_is_found_at_its_line(tmp_path: Path) -> None:
    text = CONFIGMAP + "---\n" + WORKSPACE
    assert removed_in_text(tmp_path, "ws.yaml", text) == [("ws.yaml", line_of(text, SETTING))]


def test_configmap_of_another_file_joins_at_its_own_lines(tmp_path: Path) -> None:
    (tmp_path / "cm.yaml").write_text(CONFIGMAP)
    (tmp_path / "ws.yaml").write_text(WORKSPACE)
    found = read_input_set([tmp_path])
    (workspace,) = [i for i in found.invocations if "Workspace" in i.label]
    ((_, _, where),) = [item for item in workspace.config_items if item[0] == SETTING]
    assert where is not None and where.line == line_of(CONFIGMAP, SETTING)
    assert where.file is not None and Path(where.file).name == "cm.yaml"
    (alone,) = read_input_set([tmp_path / "ws.yaml"]).invocations
    assert any("llama-inference-params" in note for note in alone.notes)
    assert not alone.config_items


@pytest.mark.parametrize("preset", ["acme-chat-13b", "Qwen/Qwen3-0.6B"])
def test_preset_the_table_does_not_know_keeps_the_skip(tmp_path: Path, preset: str) -> None:
    assert preset.lower() not in table().presets
    path = tmp_path / "inferenceset.yaml"
    path.write_text(INFERENCESET.replace(f"name: {SMALL}", f"name: {preset}"))
    found = read_input_set([path])
    assert not found.invocations
    (skipped,) = found.skipped
    assert "preset-only KAITO workspace" in skipped.reason and preset in skipped.reason
    assert not skipped.problem


def test_unknown_instance_type_says_the_parallelism_is_unknown() -> None:
    text = INFERENCESET.replace(TWO_GPUS, "<your-vm-sku>")
    (invocation,) = read_text(text, "is.yaml")
    assert "--tensor-parallel-size" not in _options(invocation)
    assert any("SKU table" in note for note in invocation.notes)


def test_transformers_runtime_annotation_starts_no_vllm(tmp_path: Path) -> None:
    """api/v1beta1/labels.go GetWorkspaceRuntimeName: the runtime annotation can pick
    KAITO's Hugging Face transformers server instead of vLLM."""
    facts = table()
    annotation = f"  annotations:\n    {facts.runtime_annotation}: {facts.transformers_runtime}\n"
    text = INFERENCESET.replace("  name: phi-4-mini\n", "  name: phi-4-mini\n" + annotation)
    path = tmp_path / "is.yaml"
    path.write_text(text)
    found = read_input_set([path])
    assert not found.invocations
    (skipped,) = found.skipped
    assert "transformers runtime" in skipped.reason and not skipped.problem
    vllm = text.replace(f": {facts.transformers_runtime}", ": vllm")
    assert len(read_text(vllm, "is.yaml")) == 1


def test_templated_node_count_is_a_note_not_a_crash() -> None:
    text = WORKSPACE.replace("count: 2", 'count: "{{ .Values.nodes }}"')
    (invocation,) = read_text(text, "ws.yaml")
    assert "--tensor-parallel-size" not in _options(invocation)
    assert any("resource.count" in note for note in invocation.notes)
