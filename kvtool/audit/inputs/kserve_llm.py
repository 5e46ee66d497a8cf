"""KServe ``LLMInferenceService``: the ``vllm serve`` its ``main`` container runs.

An LLMInferenceService's pod templates usually name the ``main`` container only to add
env, resources or probes; KServe merges them with its well-known
``LLMInferenceServiceConfig`` (``kserve-config-llm-template`` and its prefill/decode
variants), whose ``main`` container runs, in a ``bash -c`` script,
``vllm serve /mnt/models --served-model-name <spec.model.name> ${KV_TRANSFER_ARGS}
--tensor-parallel-size <parallelism.tensor> ${VLLM_ADDITIONAL_ARGS}`` followed by the
container's ``args`` (kserve/kserve config/llmisvcconfig/config-llm-template.yaml, and
config-llm-prefill-template.yaml with ``spec.prefill``'s values). So a ``main``
container that writes no ``command`` starts that server: its flags are the workload's
``parallelism.tensor``, the OffloadingConnector its ``kvCacheOffloading`` asks for, the
words of ``VLLM_ADDITIONAL_ARGS`` (at the env value's line) and its ``args``.

``kvCacheOffloading`` becomes ``--kv-transfer-config`` as the controller's
``kvTransferConfig`` template function writes it (pkg/controller/v1alpha2/llmisvc/
config_merge.go): OffloadingConnector, kv_both, ``spec_name: TieringOffloadingSpec``,
``cpu_bytes_to_use`` from ``cpu``, ``eviction_policy``, and one ``fs`` secondary tier at
``/mnt/kv-cache-<i>`` per ``fileSystem`` entry; the script leaves it out when the
additional args or ``args`` give a ``--kv-transfer-config`` of their own, and on vLLM
releases before 0.22.0.

The model is the one ``spec.model.uri`` names (``hf://org/name``), whose weights KServe
mounts at ``/mnt/models``: the model checks need the name, not the mount path.
"""

from __future__ import annotations

import json
import re

import msgspec
import yaml

from kvtool.audit.inputs import yaml_tree
from kvtool.audit.inputs.command_line import ArgvWord
from kvtool.audit.inputs.container import ConfiguredCommand, words_from_node
from kvtool.audit.inputs.quantity import parse_bytes
from kvtool.audit.model import ContainerResources, Invocation, Quantity, VolumeMount

# An LLMInferenceServiceConfig's pod templates are merged over the same well-known config.
KINDS = frozenset({"LLMInferenceService", "LLMInferenceServiceConfig"})
MAIN_CONTAINER = "main"
ADDITIONAL_ARGS = "VLLM_ADDITIONAL_ARGS"  # read by KServe's script, never by vLLM
MOUNT_PATH = "/mnt/models"


_CONFIG_KIND = re.compile(r"^kind:\s*LLMInferenceServiceConfig\s*$", re.MULTILINE)


def is_config_template(text: str) -> bool:
    """An LLMInferenceServiceConfig with Go template actions (KServe's well-known configs)."""
    return bool(_CONFIG_KIND.search(text))


def main_command(
    service: yaml.Node, kind: str, container: yaml.Node, text: str, file: str | None
) -> ConfiguredCommand | None:
    """The serve words KServe's config gives ``container``; None when it is not that case."""
    if kind not in KINDS or yaml_tree.get(container, "command") is not None:
        return None
    if yaml_tree.scalar(yaml_tree.get(container, "name")) != MAIN_CONTAINER:
        return None
    workload = _workload(service, container)
    if workload is None:
        return None  # e.g. the router's scheduler, whose container is also named main
    model = yaml_tree.get_path(service, "spec", "model")
    uri_node = yaml_tree.get(model, "uri")
    name_node = yaml_tree.get(model, "name")
    anchor = uri_node or name_node or container
    here = yaml_tree.location(anchor, file)
    words = [ArgvWord("vllm", here), ArgvWord("serve", here), ArgvWord(_model(uri_node), here)]
    name = yaml_tree.scalar(name_node)
    if name is not None and name_node is not None:
        at = yaml_tree.location(name_node, file)
        words += [ArgvWord("--served-model-name", at), ArgvWord(name, at)]
    additional = _additional_args(container, text, file)
    args = yaml_tree.sequence(yaml_tree.get(container, "args"))
    written = [w.text for w in additional] + [yaml_tree.scalar(item) or "" for item in args]
    if not any(w.split("=", 1)[0] in _KV_TRANSFER_SPELLINGS for w in written):
        words += _kv_offloading(yaml_tree.get(workload, "kvCacheOffloading"), file)
    tensor_node = yaml_tree.get_path(workload, "parallelism", "tensor")
    tensor = yaml_tree.scalar(tensor_node)
    if tensor_node is not None and tensor:
        at = yaml_tree.location(tensor_node, file)
        words += [ArgvWord("--tensor-parallel-size", at), ArgvWord(tensor, at)]
    return ConfiguredCommand(
        words=words + additional, consumed_env=(ADDITIONAL_ARGS,), notes=_misplaced(service, file)
    )


def _misplaced(service: yaml.Node, file: str | None) -> tuple[str, ...]:
    """WorkloadSpec fields written under ``spec.workload``: the v1alpha2 type inlines them
    into ``spec``, so the API server drops (or strict validation refuses) them there."""
    workload = yaml_tree.get_path(service, "spec", "workload")
    fields = ("kvCacheOffloading", "parallelism")
    found = [key for key, _, _ in yaml_tree.items(workload) if key in fields]
    if workload is None or not found:
        return ()
    where = yaml_tree.where(workload, file)
    return (
        f"{where}: spec.workload.{', spec.workload.'.join(found)} is not a field of "
        "LLMInferenceService (these belong directly under spec); KServe never applies it",
    )


_KV_TRANSFER_SPELLINGS = frozenset({"--kv-transfer-config", "--kv_transfer_config"})


def _workload(service: yaml.Node, container: yaml.Node) -> yaml.Node | None:
    """The WorkloadSpec whose pod (``template`` or ``worker``) holds ``container``:
    ``spec`` (main/decode) or ``spec.prefill``; None for any other pod of the service."""
    spec = yaml_tree.get(service, "spec")
    for workload in (spec, yaml_tree.get(spec, "prefill")):
        for pod in ("template", "worker"):
            held = yaml_tree.sequence(yaml_tree.get_path(workload, pod, "containers"))
            if any(item is container for item in held):
                return workload
    return None


def _kv_offloading(node: yaml.Node | None, file: str | None) -> list[ArgvWord]:
    """``--kv-transfer-config`` as KServe's ``kvTransferConfig`` renders ``kvCacheOffloading``."""
    cpu_node = yaml_tree.get(node, "cpu")  # findings land on the size to change
    cpu = yaml_tree.scalar(cpu_node)
    if cpu_node is None or cpu is None:
        return []
    extra: dict[str, object] = {"spec_name": "TieringOffloadingSpec"}
    size = parse_bytes(cpu)
    extra["cpu_bytes_to_use"] = size if size is not None else cpu
    policy = yaml_tree.scalar(yaml_tree.get(node, "evictionPolicy"))
    if policy:
        extra["eviction_policy"] = policy
    tiers = [
        {"type": "fs", "root_dir": f"/mnt/kv-cache-{index}"}
        for index, tier in enumerate(yaml_tree.sequence(yaml_tree.get(node, "secondary")))
        if yaml_tree.get(tier, "fileSystem") is not None
    ]
    if tiers:
        extra["secondary_tiers"] = tiers
    config = {
        "kv_connector": "OffloadingConnector",
        "kv_role": "kv_both",
        "kv_connector_extra_config": extra,
    }
    at = yaml_tree.location(cpu_node, file)
    return [ArgvWord("--kv-transfer-config", at), ArgvWord(json.dumps(config), at)]


def _model(uri_node: yaml.Node | None) -> str:
    uri = yaml_tree.scalar(uri_node) or ""
    scheme, _, rest = uri.partition("://")
    return rest if scheme == "hf" and rest else MOUNT_PATH


def _additional_args(container: yaml.Node, text: str, file: str | None) -> list[ArgvWord]:
    """``VLLM_ADDITIONAL_ARGS`` split as the config's ``eval`` splits it, at its own line."""
    for item in yaml_tree.sequence(yaml_tree.get(container, "env")):
        if yaml_tree.scalar(yaml_tree.get(item, "name")) == ADDITIONAL_ARGS:
            return words_from_node(yaml_tree.get(item, "value"), text, file)
    return []


# The well-known config's pod mounts a memory-backed emptyDir of 1Gi at /dev/shm
# (volume ``dshm`` in config-llm-template.yaml); a template that mounts its own wins.
SHM_PATH = "/dev/shm"
_CONFIG_SHM = VolumeMount(
    mount_path=SHM_PATH,
    volume="dshm",
    source="emptyDir",
    medium="Memory",
    size_limit=Quantity(text="1Gi", bytes=1 << 30),
)


def with_config_mounts(invocations: list[Invocation]) -> list[Invocation]:
    """``invocations`` of a ``main`` container with the config's /dev/shm added to its pod."""
    found: list[Invocation] = []
    for invocation in invocations:
        resources = invocation.resources or ContainerResources()
        if resources.mount_at(SHM_PATH) is None:
            mounts = (*resources.mounts, _CONFIG_SHM)
            resources = msgspec.structs.replace(resources, mounts=mounts)
            note = "/dev/shm: the 1Gi memory-backed emptyDir of KServe's well-known config"
            invocation = msgspec.structs.replace(
                invocation, resources=resources, notes=(*invocation.notes, note)
            )
        found.append(invocation)
    return found
