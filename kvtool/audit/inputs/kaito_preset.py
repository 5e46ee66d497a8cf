"""KAITO ``Workspace``/``InferenceSet`` naming only a preset: the vLLM command KAITO runs.

KAITO's controller writes the command itself (kaito-project/kaito ``pkg/model/interface.go``
``buildVLLMInferenceCommand`` at the tag ``rules/kaito/presets.toml`` was generated from):
its wrapper ``python3 /workspace/vllm/inference_api.py`` with the words its preset
generator gives the model (``--dtype``, ``--trust-remote-code``, tokenizer and format
modes, tool-call and reasoning parsers, chat template), ``--model`` (the preset's
HuggingFace id), ``--served-model-name``, ``--max-model-len auto``,
``--gpu-memory-utilization``, ``--kv-events-config`` and the
parallelism of the instance type: data parallel over the node's GPUs when the weights take
under half of one GPU, else tensor parallel over them, and with ``resource.count`` nodes
pipeline parallel across nodes. ``inference.config`` names a ConfigMap whose
``inference_config.yaml`` is mounted and read by the wrapper, which appends its ``vllm:``
keys after the generated arguments, so they win. Generated words point at the
Workspace field they come from (preset name, instance type, node count).

Not modelled: ``--compilation-config.pass_config.fuse_allreduce_rms``, model streaming,
MIG partitions, LoRA adapters and the routing sidecar's port. A preset the table does
not know (a HuggingFace id, a newer preset) and the ``kaito.sh/runtime: transformers``
runtime are skipped with the reason.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from typing import Any

import msgspec
import yaml

from kvtool.audit.inputs import kaito, yaml_tree
from kvtool.audit.inputs.command_line import ArgvWord
from kvtool.audit.inputs.container import container_invocations
from kvtool.audit.inputs.shell import ShellContext
from kvtool.audit.inputs.source import ReadSource
from kvtool.audit.model import Invocation, Location, Suppression
from kvtool.resources import read_table, rules_dir

API_GROUP = "kaito.sh/"
KINDS = frozenset({"Workspace", "InferenceSet"})
CONFIG_KEY = "inference_config.yaml"
_KV_EVENTS = json.dumps({"enable_kv_cache_events": True}, separators=(",", ":"))


@dataclass(frozen=True)
class Preset:
    name: str
    model: str
    served_model_name: str
    model_file_size_gib: float
    words: tuple[tuple[str, str], ...]  # the generator's run params; "" for a switch


@dataclass(frozen=True)
class InstanceType:
    gpu_count: int
    gpu_memory_gib: int
    gpu_model: str


@dataclass(frozen=True)
class PresetTable:
    kaito_tag: str
    base_command: tuple[str, ...]
    gpu_memory_utilization: str
    gpu_memory_utilization_by_gpu: dict[str, str]
    config_file: str
    download_dir: str
    runtime_annotation: str
    transformers_runtime: str
    presets: dict[str, Preset]
    instance_types: dict[str, InstanceType]


@cache
def table() -> PresetTable:
    raw = read_table(rules_dir() / "kaito" / "presets.toml")
    return PresetTable(
        kaito_tag=raw["kaito_tag"],
        base_command=tuple(raw["base_command"].split()),
        gpu_memory_utilization=raw["gpu_memory_utilization"],
        gpu_memory_utilization_by_gpu=dict(raw["gpu_memory_utilization_by_gpu"]),
        config_file=raw["config_file"],
        download_dir=raw["download_dir"],
        runtime_annotation=raw["runtime_annotation"],
        transformers_runtime=raw["transformers_runtime"],
        presets={
            row["name"]: Preset(
                name=row["name"],
                model=row["model"],
                served_model_name=row["served_model_name"],
                model_file_size_gib=float(row["model_file_size_gib"]),
                words=tuple((flag, value) for flag, value in row["words"]),
            )
            for row in raw["preset"]
        },
        instance_types={
            row["name"]: InstanceType(row["gpu_count"], row["gpu_memory_gib"], row["gpu_model"])
            for row in raw["instance_type"]
        },
    )


@dataclass(frozen=True)
class PresetWorkload:
    """Where one KAITO object keeps the fields its controller reads."""

    kind: str
    name: str
    inference: yaml.Node | None
    resource: yaml.Node | None
    preset: yaml.Node | None  # the preset's name scalar
    runtime: str | None  # the kaito.sh/runtime annotation

    @property
    def preset_name(self) -> str | None:
        return yaml_tree.scalar(self.preset)

    @property
    def config_name(self) -> str | None:
        return yaml_tree.scalar(yaml_tree.get(self.inference, "config"))


def preset_workload(node: yaml.Node) -> PresetWorkload | None:
    """The preset-only inference of a KAITO object (no pod ``template``), else None."""
    kind = yaml_tree.scalar(yaml_tree.get(node, "kind")) or ""
    api = yaml_tree.scalar(yaml_tree.get(node, "apiVersion")) or ""
    if kind not in KINDS or not api.startswith(API_GROUP):
        return None
    # api/v1beta1 Workspace keeps inference/resource at the top; api/v1alpha1
    # InferenceSet under spec.template (examples/inference/kaito_inferenceset_*.yaml).
    holder = yaml_tree.get_path(node, "spec", "template") if kind == "InferenceSet" else node
    inference = yaml_tree.get(holder, "inference")
    preset = yaml_tree.get_path(inference, "preset", "name")
    if yaml_tree.scalar(preset) is None or yaml_tree.get(inference, "template") is not None:
        return None
    name = yaml_tree.scalar(yaml_tree.get_path(node, "metadata", "name")) or "?"
    # An InferenceSet's annotations are set on the Workspaces it creates.
    annotations = yaml_tree.get_path(node, "metadata", "annotations")
    runtime = yaml_tree.scalar(yaml_tree.get(annotations, table().runtime_annotation))
    resource = yaml_tree.get(holder, "resource")
    return PresetWorkload(kind, name, inference, resource, preset, runtime)


def known(workload: PresetWorkload) -> bool:
    return (workload.preset_name or "").lower() in table().presets


def runs_vllm(workload: PresetWorkload) -> bool:
    """False when the runtime annotation picks KAITO's Hugging Face transformers server."""
    return workload.runtime != table().transformers_runtime


def referenced_configmaps(documents: list[yaml.Node]) -> frozenset[str]:
    """ConfigMaps that a known preset workload of these documents reads: their ``vllm:``
    arguments join that workload's command instead of standing alone."""
    names: set[str] = set()
    for document in documents:
        workload = preset_workload(document)
        if workload is None or not known(workload) or not runs_vllm(workload):
            continue
        if workload.config_name:
            names.add(workload.config_name)
    return frozenset(names)


def read_workload(
    workload: PresetWorkload,
    text: str,
    source: ReadSource,
    owner: str,
    suppressions: tuple[Suppression, ...],
    local_configmaps: dict[str, yaml.Node],
) -> list[Invocation]:
    facts = table()
    preset = facts.presets.get((workload.preset_name or "").lower())
    if preset is None or not runs_vllm(workload):
        return []
    file = source.file
    at_preset = yaml_tree.location(workload.preset, file) if workload.preset else None
    count_node = yaml_tree.get(workload.resource, "count")
    instance_node = yaml_tree.get(workload.resource, "instanceType")
    at_count = yaml_tree.location(count_node, file) if count_node else at_preset
    at_instance = yaml_tree.location(instance_node, file) if instance_node else at_preset
    count = yaml_tree.scalar(count_node) or "1"
    # ASCII digits, few enough for int(): "²" is a digit to str.isdigit, not to int().
    nodes = int(count) if count.isascii() and count.isdigit() and len(count) <= 9 else None
    instance = facts.instance_types.get(yaml_tree.scalar(instance_node) or "")
    notes: list[str] = []

    # InferenceSet workspaces serve under the InferenceSet's name (the
    # WorkspaceCreatedByInferenceSetLabel branch); a Workspace under the preset's model.
    served = workload.name if workload.kind == "InferenceSet" else preset.served_model_name
    utilization = facts.gpu_memory_utilization
    if instance is not None:
        utilization = facts.gpu_memory_utilization_by_gpu.get(instance.gpu_model, utilization)
    generated: list[tuple[str, str | None, Location | None]] = [
        ("--" + flag, value or None, at_preset) for flag, value in preset.words
    ]
    generated += [
        ("--model", preset.model, at_preset),
        ("--download-dir", facts.download_dir, at_preset),
        ("--served-model-name", served, at_preset),
        ("--max-model-len", "auto", at_preset),
        ("--gpu-memory-utilization", utilization, at_instance),
        ("--kv-events-config", _KV_EVENTS, at_preset),
    ]
    if nodes is None:
        notes.append(
            f"KAITO resource.count {count!r} is not a number: the parallelism flags are not known"
        )
    else:
        generated += _parallelism(preset, instance, nodes, at_instance, at_count)
    if instance is None:
        notes.append(
            f"KAITO instance type {yaml_tree.scalar(instance_node)!r} is not in its SKU table "
            f"at {facts.kaito_tag}: its controller reads the GPU count from the nodes, so "
            "the parallelism flags are not known"
        )
    config = _config(workload, text, source, local_configmaps, suppressions, notes)
    if config is not None:
        config_node = yaml_tree.get(workload.inference, "config")
        at_config = yaml_tree.location(config_node, file) if config_node else at_preset
        generated.append(("--kaito-config-file", facts.config_file, at_config))
        # The wrapper appends the file's vllm: keys after the generated words: they win.
        overridden = {_spelling(key) for key, _, _ in config.config_items}
        generated = [word for word in generated if _spelling(word[0]) not in overridden]
    words = [ArgvWord(word, at_preset) for word in facts.base_command]
    for flag, value, where in generated:
        words.append(ArgvWord(flag, where))
        if value is not None:
            words.append(ArgvWord(value, where))
    context = ShellContext(
        file=file,
        kind="kubernetes",
        base_dir=source.base_dir,
        label=f"{file or '<input>'}: {owner} (KAITO {facts.kaito_tag} preset "
        f"{workload.preset_name})",
        suppressions=suppressions,
    )
    found = container_invocations(words, text, context, image_entrypoint=None)
    return [_with_config(invocation, config, notes) for invocation in found]


def _spelling(flag: str) -> str:
    """One spelling for ``--max_model_len``, ``max-model-len`` and the like."""
    return flag.removeprefix("--").replace("_", "-")


def _parallelism(
    preset: Preset,
    instance: InstanceType | None,
    nodes: int,
    at_instance: Location | None,
    at_count: Location | None,
) -> list[tuple[str, str | None, Location | None]]:
    """configureParallelism: DP when the weights take under half a GPU on one node, else
    TP over the node's GPUs, and PP over ``resource.count`` nodes."""
    if instance is None:
        return []
    gpus = instance.gpu_count
    if nodes == 1 and gpus > 1 and preset.model_file_size_gib * gpus * 2 < instance.gpu_memory_gib:
        return [
            ("--data-parallel-size", str(gpus), at_instance),
            ("--tensor-parallel-size", "1", at_instance),
            ("--kaito-kv-cache-cpu-memory-utilization", "0", at_instance),
        ]
    found: list[tuple[str, str | None, Location | None]] = [
        ("--tensor-parallel-size", str(gpus), at_instance)
    ]
    if nodes > 1:
        found += [
            ("--kaito-kv-cache-cpu-memory-utilization", "0", at_count),
            ("--pipeline-parallel-size", str(nodes), at_count),
            ("--distributed-executor-backend", "ray", at_count),
        ]
    return found


def _config(
    workload: PresetWorkload,
    text: str,
    source: ReadSource,
    local_configmaps: dict[str, yaml.Node],
    suppressions: tuple[Suppression, ...],
    notes: list[str],
) -> Invocation | None:
    """The referenced ConfigMap's ``inference_config.yaml``, read as KAITO's wrapper reads it."""
    name = workload.config_name
    if name is None:
        return None
    local = local_configmaps.get(name)
    if local is not None:
        for invocation in kaito.read_configmap(local, text, source.file, list(suppressions)):
            if invocation.label.endswith(f" {CONFIG_KEY}"):
                return invocation
    elsewhere = source.configmaps.get(name, {}).get(CONFIG_KEY)
    if elsewhere is not None:
        return _config_from_value(*elsewhere)
    notes.append(
        f"KAITO inference ConfigMap {name!r} is not in the input set: its vllm: arguments "
        "are not seen"
    )
    # KAITO mounts it all the same: the wrapper option is still given.
    return Invocation(kind="kaito", label=name)


def _config_from_value(value: str, where: Location | None) -> Invocation:
    """A ConfigMap of another file: its value, each key located below the ``|`` line."""
    file = where.file if where else None
    items: list[tuple[str, Any, Location | None]] = []
    settings: dict[str, tuple[Any, Location | None]] = {}

    def locate(node: yaml.Node) -> Location | None:
        if where is None or where.line is None:
            return where
        return Location(file=file, line=where.line + 1 + node.start_mark.line)

    documents = yaml_tree.compose_documents(value, file)
    for key, key_node, node in yaml_tree.items(documents[0] if documents else None):
        if key == kaito.VLLM_SECTION:
            for flag, flag_node, flag_value in yaml_tree.items(node):
                items.append((flag, yaml_tree.construct(flag_value, file), locate(flag_node)))
        else:
            settings[key] = (yaml_tree.construct(node, file), locate(key_node))
    return Invocation(kind="kaito", label=CONFIG_KEY, config_items=tuple(items), settings=settings)


def _with_config(invocation: Invocation, config: Invocation | None, notes: list[str]) -> Invocation:
    if config is None:
        return msgspec.structs.replace(invocation, notes=invocation.notes + tuple(notes))
    return msgspec.structs.replace(
        invocation,
        config_items=invocation.config_items + config.config_items,
        settings={**invocation.settings, **config.settings},
        suppressions=invocation.suppressions + config.suppressions,
        notes=invocation.notes + tuple(notes),
    )


def skip_preset_only(documents: list[yaml.Node], file: str | None) -> None:
    """For a file that started no server: raise ``NoServerCommand`` saying why when it holds
    preset-only KAITO workspaces that run no vLLM kvtool can map: a preset its table does
    not know, or the transformers runtime."""
    facts = table()
    unknown: list[str] = []
    transformers: list[str] = []
    for workload in map(preset_workload, documents):
        if workload is None:
            continue
        what = f"{workload.kind}/{workload.name} (preset {workload.preset_name})"
        if not runs_vllm(workload):
            transformers.append(what)
        elif not known(workload):
            unknown.append(what)
    reasons: list[str] = []
    if unknown:
        reasons.append(
            f"preset-only KAITO workspace ({'; '.join(unknown)}): the preset is not in "
            f"kvtool's table of KAITO {facts.kaito_tag} presets, and KAITO's controller "
            "generates the vLLM command from it; audit the inference ConfigMap "
            "(inference_config.yaml) it uses"
        )
    if transformers:
        reasons.append(
            f"KAITO workspace on the Hugging Face transformers runtime ({'; '.join(transformers)}"
            f": {facts.runtime_annotation}: {facts.transformers_runtime}): it starts no vLLM"
        )
    if reasons:
        from kvtool.audit.inputs import NoServerCommand

        raise NoServerCommand(f"{file or '<input>'}: " + "; ".join(reasons))
