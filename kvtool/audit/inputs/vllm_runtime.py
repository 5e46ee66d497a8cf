"""production-stack's ``VLLMRuntime`` custom resource: the command its operator runs.

The operator builds the vllm container's argv from the resource
(vllm-project/production-stack operator/internal/controller/vllmruntime_controller.go,
``deploymentForVLLMRuntime``, commit 0f1e8295): ``/opt/venv/bin/vllm serve`` with
``model.modelURL --host 0.0.0.0 --port vllmConfig.port``, flags from ``model`` and
``vllmConfig``, ``extraArgs``, and with ``lmCacheConfig.enabled`` an LMCache
``--kv-transfer-config`` plus ``LMCACHE_*`` variables. Every word points at the field
it came from.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import yaml

from kvtool.audit.inputs import yaml_tree
from kvtool.audit.inputs.command_line import ArgvWord
from kvtool.audit.inputs.container import container_invocations
from kvtool.audit.inputs.shell import ShellContext
from kvtool.audit.inputs.source import ReadSource
from kvtool.audit.model import EnvAssignment, Invocation, Location, Suppression

API_GROUP = "production-stack.vllm.ai/"
# (section, key, flag): a value flag written when the field is set (non-zero, non-empty).
_VALUE_FLAGS = (
    ("model", "toolCallParser", "--tool-call-parser"),
    ("model", "maxModelLen", "--max-model-len"),
    ("model", "dtype", "--dtype"),
    ("vllmConfig", "tensorParallelSize", "--tensor-parallel-size"),
    ("model", "maxNumSeqs", "--max-num-seqs"),
    ("vllmConfig", "gpuMemoryUtilization", "--gpu_memory_utilization"),
    ("vllmConfig", "maxLoras", "--max_loras"),
)
_SWITCHES = (
    ("model", "enableLoRA", "--enable-lora"),
    ("model", "enableTool", "--enable-auto-tool-choice"),
)
_BOOLEANS = (
    ("enableChunkedPrefill", "--enable-chunked-prefill", "--no-enable-chunked-prefill"),
    ("enablePrefixCaching", "--enable-prefix-caching", "--no-enable-prefix-caching"),
)


def is_vllm_runtime(node: yaml.Node, kind: str) -> bool:
    api = yaml_tree.scalar(yaml_tree.get(node, "apiVersion")) or ""
    return kind == "VLLMRuntime" and api.startswith(API_GROUP)


def _set(value: str | None) -> bool:
    return value not in (None, "", "0", "false", "False")


def read_runtime(
    node: yaml.Node,
    text: str,
    source: ReadSource,
    owner: str,
    suppressions: tuple[Suppression, ...],
) -> list[Invocation]:
    file = source.file
    spec = yaml_tree.get(node, "spec")
    here = yaml_tree.location(spec if spec is not None else node, file)

    def at(n: yaml.Node | None) -> Location:
        return yaml_tree.location(n, file) if n is not None else here

    def field(section: str, key: str) -> yaml.Node | None:
        return yaml_tree.get(yaml_tree.get(spec, section), key)

    url = field("model", "modelURL")
    port = field("vllmConfig", "port")
    words = [ArgvWord("vllm", at(url)), ArgvWord("serve", at(url))]
    words.append(ArgvWord(yaml_tree.scalar(url) or "", at(url)))
    words += [ArgvWord("--host", at(url)), ArgvWord("0.0.0.0", at(url))]
    words += [ArgvWord("--port", at(port)), ArgvWord(yaml_tree.scalar(port) or "0", at(port))]
    for section, key, flag in _SWITCHES:
        value = field(section, key)
        if _set(yaml_tree.scalar(value)):
            words.append(ArgvWord(flag, at(value)))
    for key, on, off in _BOOLEANS:
        value = field("vllmConfig", key)
        words.append(ArgvWord(on if _set(yaml_tree.scalar(value)) else off, at(value)))
    for section, key, flag in _VALUE_FLAGS:
        value = field(section, key)
        text_value = yaml_tree.scalar(value)
        if value is not None and _set(text_value):
            words += [ArgvWord(flag, at(value)), ArgvWord(text_value or "", at(value))]
    for item in yaml_tree.sequence(field("vllmConfig", "extraArgs")):
        words.append(ArgvWord(yaml_tree.scalar(item) or "", at(item)))
    env = _env(field, at)
    enabled = field("lmCacheConfig", "enabled")
    if _set(yaml_tree.scalar(enabled)):
        v1 = _set(yaml_tree.scalar(field("vllmConfig", "v1")))
        connector = "LMCacheConnectorV1" if v1 else "LMCacheConnector"
        config = json.dumps({"kv_connector": connector, "kv_role": "kv_both"})
        words += [ArgvWord("--kv-transfer-config", at(enabled)), ArgvWord(config, at(enabled))]
    if _set(yaml_tree.scalar(field("model", "chatTemplate"))):
        template = field("model", "chatTemplate")
        words += [ArgvWord("--chat-template", at(template))]
        words += [ArgvWord("/etc/chat-template.json", at(template))]
    image = yaml_tree.get_path(spec, "deploymentConfig", "image")
    registry = yaml_tree.scalar(yaml_tree.get(image, "registry"))
    name = yaml_tree.scalar(yaml_tree.get(image, "name"))
    context = ShellContext(
        file=file,
        kind="kubernetes",
        base_dir=source.base_dir,
        env=tuple(env),
        image=f"{registry}/{name}" if registry and name else name,
        label=f"{file or '<input>'}: {owner} (production-stack operator)",
        suppressions=suppressions,
    )
    return container_invocations(words, text, context, image_entrypoint=None)


def _env(
    field: Callable[[str, str], yaml.Node | None], at: Callable[[yaml.Node | None], Location]
) -> list[EnvAssignment]:
    env: list[EnvAssignment] = []
    v1 = field("vllmConfig", "v1")
    env.append(
        EnvAssignment(
            name="VLLM_USE_V1", value="1" if _set(yaml_tree.scalar(v1)) else "0", location=at(v1)
        )
    )
    enabled = field("lmCacheConfig", "enabled")
    if _set(yaml_tree.scalar(enabled)):
        for name, value in (
            ("LMCACHE_LOG_LEVEL", "DEBUG"),
            ("LMCACHE_USE_EXPERIMENTAL", "True"),
            ("VLLM_RPC_TIMEOUT", "1000000"),
        ):
            env.append(EnvAssignment(name=name, value=value, location=at(enabled)))
        for key, switch, size in (
            ("cpuOffloadingBufferSize", "LMCACHE_LOCAL_CPU", "LMCACHE_MAX_LOCAL_CPU_SIZE"),
            ("diskOffloadingBufferSize", "LMCACHE_LOCAL_DISK", "LMCACHE_MAX_LOCAL_DISK_SIZE"),
        ):
            node = field("lmCacheConfig", key)
            buffer = yaml_tree.scalar(node)
            if buffer:
                env.append(EnvAssignment(name=switch, value="True", location=at(node)))
                env.append(EnvAssignment(name=size, value=buffer, location=at(node)))
    for item in yaml_tree.sequence(field("vllmConfig", "env")):
        name_node = yaml_tree.get(item, "name")
        env_name = yaml_tree.scalar(name_node)
        if env_name is not None:
            env_value = yaml_tree.scalar(yaml_tree.get(item, "value"))
            env.append(EnvAssignment(name=env_name, value=env_value, location=at(name_node)))
    return env
