"""Helm values files: the ``vllm serve`` command a chart renders from them.

No Helm runs here: each chart kvtool knows is mapped the way its template maps the
values, and every word points at the value (or key) it came from, so a finding lands
on the line of ``values.yaml`` to change.

* production-stack (``servingEngineSpec.modelSpec[]``): the vllm container of
  vllm-project/production-stack helm/templates/deployment-vllm-multi.yaml (commit
  010004ee): ``vllm serve <modelURL> --host 0.0.0.0 --port 8000``, then the flags of
  ``vllmConfig``, ``extraArgs``, the LMCache ``--kv-transfer-config`` and the
  ``LMCACHE_*`` environment of ``lmcacheConfig``.
* vLLM's own chart (``image.command``): vllm-project/vllm
  examples/online_serving/chart-helm/templates/deployment.yaml: the container runs
  ``image.command`` with ``image.env``.

Container lists in values (llm-d's ``decode``/``prefill``) are Kubernetes-shaped and
read by the Kubernetes reader.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable

import yaml

from kvtool.audit.inputs import yaml_tree
from kvtool.audit.inputs.command_line import ArgvWord
from kvtool.audit.inputs.container import container_invocations, words_from_node
from kvtool.audit.inputs.shell import ShellContext
from kvtool.audit.inputs.source import ReadSource
from kvtool.audit.inputs.suppressions import yaml_comment_suppressions
from kvtool.audit.model import EnvAssignment, Invocation, Location, Suppression
from kvtool.numbers import BadNumber, parse_float

# production-stack's chart.container-port default.
_PRODUCTION_STACK_PORT = "8000"
# vllmConfig key -> the flag the template writes for it (spellings as the template has them).
_VALUE_FLAGS = (
    ("maxModelLen", "--max-model-len"),
    ("dtype", "--dtype"),
    ("tensorParallelSize", "--tensor-parallel-size"),
    ("maxNumSeqs", "--max-num-seqs"),
    ("gpuMemoryUtilization", "--gpu_memory_utilization"),
    ("maxLoras", "--max_loras"),
)


def read(text: str, source: ReadSource) -> list[Invocation]:
    file = source.file
    comments = tuple(yaml_comment_suppressions(text, file))
    found: list[Invocation] = []
    for document in yaml_tree.compose_documents(text, file):
        notes = tuple(yaml_tree.duplicate_keys(document, file))
        engine = yaml_tree.get(document, "servingEngineSpec")
        for spec in yaml_tree.sequence(yaml_tree.get(engine, "modelSpec")):
            found.extend(_production_stack(spec, text, source, comments, notes))
        image = yaml_tree.get(document, "image")
        if isinstance(image, yaml.MappingNode) and yaml_tree.get(image, "command") is not None:
            found.extend(_vllm_chart(document, image, text, source, comments, notes))
    return found


def _scalar_word(node: yaml.Node, file: str | None) -> ArgvWord:
    return ArgvWord(yaml_tree.scalar(node) or "", yaml_tree.location(node, file))


def _truthy(node: yaml.Node | None) -> bool:
    return (yaml_tree.scalar(node) or "").lower() in ("true", "yes", "on", "1")


def _production_stack(
    spec: yaml.Node,
    text: str,
    source: ReadSource,
    comments: tuple[Suppression, ...],
    notes: tuple[str, ...],
) -> list[Invocation]:
    file = source.file
    name = yaml_tree.scalar(yaml_tree.get(spec, "name")) or "?"
    if _truthy(yaml_tree.get_path(spec, "raySpec", "enabled")):
        return _production_stack_ray(spec, text, source, comments, notes)
    here = yaml_tree.location(spec, file)

    def at(node: yaml.Node | None) -> Location:
        return yaml_tree.location(node, file) if node is not None else here

    def flag(text_: str, node: yaml.Node | None) -> ArgvWord:
        return ArgvWord(text_, at(node))

    words = _serve_head(spec, file, flag) + _feature_words(spec, file, flag)
    config = yaml_tree.get(spec, "vllmConfig")
    if isinstance(config, yaml.MappingNode):
        words += _vllm_config_words(config, file, flag)
    lmcache = yaml_tree.get(spec, "lmcacheConfig")
    env = list(_production_stack_env(spec, config, lmcache, file))
    if _truthy(yaml_tree.get(lmcache, "enabled")):
        role = yaml_tree.scalar(yaml_tree.get(lmcache, "kvRole")) or "kv_both"
        connector: dict[str, object] = {"kv_connector": "LMCacheConnectorV1", "kv_role": role}
        if yaml_tree.get(lmcache, "enablePD") is not None:
            # The template passes nixlRole as the RPC port, as written.
            rpc = yaml_tree.scalar(yaml_tree.get(lmcache, "nixlRole"))
            connector["kv_connector_extra_config"] = {
                "discard_partial_chunks": False,
                "lmcache_rpc_port": rpc,
            }
        enabled = yaml_tree.get(lmcache, "enabled")
        words += [flag("--kv-transfer-config", enabled), flag(json.dumps(connector), enabled)]
    template = yaml_tree.get(spec, "chatTemplate")
    if yaml_tree.scalar(template):
        words += [
            flag("--chat-template", template),
            flag(f"/templates/{yaml_tree.scalar(template)}", template),
        ]
    label = f"production-stack modelSpec {name}"
    return _chart_invocations(words, text, source, env, spec, label, comments, notes)


def _serve_head(
    spec: yaml.Node, file: str | None, flag: Callable[[str, yaml.Node | None], ArgvWord]
) -> list[ArgvWord]:
    """``vllm serve <modelURL> --host 0.0.0.0 --port 8000``, as both production-stack
    templates (Deployment and RayCluster) start a modelSpec."""
    url = yaml_tree.get(spec, "modelURL")
    words = [flag("vllm", url), flag("serve", url)]
    if url is not None:
        words.append(_scalar_word(url, file))
    for word in ("--host", "0.0.0.0", "--port", _PRODUCTION_STACK_PORT):
        words.append(flag(word, url))
    return words


def _feature_words(
    spec: yaml.Node, file: str | None, flag: Callable[[str, yaml.Node | None], ArgvWord]
) -> list[ArgvWord]:
    """The LoRA and tool-calling flags a modelSpec turns on."""
    words: list[ArgvWord] = []
    if _truthy(yaml_tree.get(spec, "enableLoRA")):
        words.append(flag("--enable-lora", yaml_tree.get(spec, "enableLoRA")))
    if _truthy(yaml_tree.get(spec, "enableTool")):
        words.append(flag("--enable-auto-tool-choice", yaml_tree.get(spec, "enableTool")))
    parser = yaml_tree.get(spec, "toolCallParser")
    if parser is not None and yaml_tree.scalar(parser):
        words += [flag("--tool-call-parser", parser), _scalar_word(parser, file)]
    return words


def _vllm_config_words(
    config: yaml.Node,
    file: str | None,
    flag: Callable[[str, yaml.Node | None], ArgvWord],
    value_flags: tuple[tuple[str, str], ...] = _VALUE_FLAGS,
    *,
    prefix_caching_always: bool = True,
) -> list[ArgvWord]:
    """The flags a chart writes from ``vllmConfig``. The Deployment template writes one of
    the two prefix-caching spellings whenever vllmConfig is given; the RayCluster start
    script only ``--enable-prefix-caching``, when it is true."""
    words: list[ArgvWord] = []
    chunked = yaml_tree.get(config, "enableChunkedPrefill")
    if chunked is not None:
        spelled = "--enable-chunked-prefill" if _truthy(chunked) else "--no-enable-chunked-prefill"
        words.append(flag(spelled, chunked))
    prefix = yaml_tree.get(config, "enablePrefixCaching")
    if prefix_caching_always:
        words.append(
            flag(
                "--enable-prefix-caching" if _truthy(prefix) else "--no-enable-prefix-caching",
                prefix if prefix is not None else config,
            )
        )
    elif _truthy(prefix):
        words.append(flag("--enable-prefix-caching", prefix))
    for key, spelled in value_flags:
        node = yaml_tree.get(config, key)
        if node is not None:
            words += [flag(spelled, node), _scalar_word(node, file)]
    for item in yaml_tree.sequence(yaml_tree.get(config, "extraArgs")):
        words.append(_scalar_word(item, file))
    return words


def _production_stack_env(
    spec: yaml.Node, config: yaml.Node | None, lmcache: yaml.Node | None, file: str | None
) -> list[EnvAssignment]:
    env = _env_list(yaml_tree.get(spec, "env"), file)
    if lmcache is None:
        return env

    def put(name: str, value: str, node: yaml.Node) -> None:
        env.append(EnvAssignment(name=name, value=value, location=yaml_tree.location(node, file)))

    enabled = yaml_tree.get(lmcache, "enabled")
    if enabled is not None and _truthy(enabled):
        put("LMCACHE_USE_EXPERIMENTAL", "True", enabled)
        put("VLLM_RPC_TIMEOUT", "1000000", enabled)
    devices = yaml_tree.get(lmcache, "cudaVisibleDevices")
    if devices is not None:
        put("CUDA_VISIBLE_DEVICES", yaml_tree.scalar(devices) or "", devices)
    pd = yaml_tree.get(lmcache, "enablePD")
    if pd is not None and _truthy(pd):
        put("LMCACHE_LOCAL_CPU", "False", pd)
        put("LMCACHE_MAX_LOCAL_CPU_SIZE", "0", pd)
    cpu = yaml_tree.get(lmcache, "cpuOffloadingBufferSize")
    size = yaml_tree.scalar(cpu)
    if cpu is not None and size is not None and _positive(size):
        put("LMCACHE_LOCAL_CPU", "True", cpu)
        put("LMCACHE_MAX_LOCAL_CPU_SIZE", size, cpu)
    disk = yaml_tree.get(lmcache, "diskOffloadingBufferSize")
    if disk is not None and yaml_tree.scalar(disk) is not None:
        put("LMCACHE_MAX_LOCAL_DISK_SIZE", yaml_tree.scalar(disk) or "", disk)
    return env


def _env_list(node: yaml.Node | None, file: str | None) -> list[EnvAssignment]:
    """A container-style ``env:`` list of ``{name, value}`` (valueFrom: value unknown)."""
    env: list[EnvAssignment] = []
    for item in yaml_tree.sequence(node):
        name_node = yaml_tree.get(item, "name")
        name = yaml_tree.scalar(name_node)
        if name is not None and name_node is not None:
            value = yaml_tree.scalar(yaml_tree.get(item, "value"))
            location = yaml_tree.location(name_node, file)
            env.append(EnvAssignment(name=name, value=value, location=location))
    return env


def _positive(value: str) -> bool:
    """At least 1 (what LMCache's int(float(x)) keeps), however large: the LMCache rules
    judge the size itself."""
    try:
        return parse_float(value, "cpuOffloadingBufferSize", high=math.inf) >= 1
    except BadNumber:
        return False


def _vllm_chart_configs(document: yaml.Node, file: str | None) -> list[EnvAssignment]:
    """``configs``: the chart's ConfigMap, given to the container by ``envFrom`` (so
    ``image.env``, applied after it, wins) in vLLM's chart templates/configmap.yaml and
    templates/deployment.yaml."""
    return [
        EnvAssignment(
            name=key, value=yaml_tree.scalar(value), location=yaml_tree.location(key_node, file)
        )
        for key, key_node, value in yaml_tree.items(yaml_tree.get(document, "configs"))
    ]


def _vllm_chart(
    document: yaml.Node,
    image: yaml.Node,
    text: str,
    source: ReadSource,
    comments: tuple[Suppression, ...],
    notes: tuple[str, ...],
) -> list[Invocation]:
    file = source.file
    words = words_from_node(yaml_tree.get(image, "command"), text, file)
    env = _vllm_chart_configs(document, file) + _env_list(yaml_tree.get(image, "env"), file)
    label = "vLLM chart image.command"
    return _chart_invocations(words, text, source, env, image, label, comments, notes)


def _chart_invocations(
    words: list[ArgvWord],
    text: str,
    source: ReadSource,
    env: list[EnvAssignment],
    image_node: yaml.Node | None,
    label: str,
    comments: tuple[Suppression, ...],
    notes: tuple[str, ...],
) -> list[Invocation]:
    """The invocations a chart's container renders to, its image from ``repository``/``tag``."""
    repository = yaml_tree.scalar(yaml_tree.get(image_node, "repository"))
    tag = yaml_tree.scalar(yaml_tree.get(image_node, "tag"))
    context = ShellContext(
        file=source.file,
        kind="helm-values",
        base_dir=source.base_dir,
        env=tuple(env),
        image=f"{repository}:{tag}" if repository and tag else repository,
        label=f"{source.file or '<input>'}: {label}",
        suppressions=comments,
    )
    found = container_invocations(words, text, context, image_entrypoint=None)
    return [_with_notes(i, notes) for i in found]


def _with_notes(invocation: Invocation, notes: tuple[str, ...]) -> Invocation:
    import msgspec

    return msgspec.structs.replace(invocation, notes=invocation.notes + notes)


# vllmConfig key -> flag, as the RayCluster's start script writes them (hyphenated).
_RAY_VALUE_FLAGS = (
    ("maxModelLen", "--max-model-len"),
    ("dtype", "--dtype"),
    ("tensorParallelSize", "--tensor-parallel-size"),
    ("pipelineParallelSize", "--pipeline-parallel-size"),
    ("maxNumSeqs", "--max-num-seqs"),
    ("gpuMemoryUtilization", "--gpu-memory-utilization"),
    ("maxLoras", "--max-loras"),
)


def _production_stack_ray(
    spec: yaml.Node,
    text: str,
    source: ReadSource,
    comments: tuple[Suppression, ...],
    notes: tuple[str, ...],
) -> list[Invocation]:
    """A modelSpec with ``raySpec.enabled``: the head of a RayCluster runs vLLM.

    Mapped as the ``vllm-entrypoint.sh`` ConfigMap of vllm-project/production-stack
    helm/templates/ray-cluster.yaml builds its ``ARGS``: ``vllm serve <modelURL> --host
    0.0.0.0 --port 8000 --distributed-executor-backend ray``, then LoRA/tool flags, the
    ``vllmConfig`` flags (prefix caching only when true; pipeline parallel too),
    ``extraArgs``, ``--revision``, the LMCache ``--kv-transfer-config`` and the chat template.
    """
    file = source.file
    name = yaml_tree.scalar(yaml_tree.get(spec, "name")) or "?"
    here = yaml_tree.location(spec, file)

    def flag(text_: str, node: yaml.Node | None) -> ArgvWord:
        return ArgvWord(text_, yaml_tree.location(node, file) if node is not None else here)

    words = _serve_head(spec, file, flag)
    ray = yaml_tree.get_path(spec, "raySpec", "enabled")
    words += [flag("--distributed-executor-backend", ray), flag("ray", ray)]
    words += _feature_words(spec, file, flag)
    config = yaml_tree.get(spec, "vllmConfig")
    if isinstance(config, yaml.MappingNode):
        words += _vllm_config_words(
            config, file, flag, _RAY_VALUE_FLAGS, prefix_caching_always=False
        )
    revision = yaml_tree.get(spec, "modelRevision")
    if revision is not None and yaml_tree.scalar(revision):
        words += [flag("--revision", revision), _scalar_word(revision, file)]
    lmcache = yaml_tree.get(spec, "lmcacheConfig")
    enabled = yaml_tree.get(lmcache, "enabled")
    if _truthy(enabled):
        v1 = yaml_tree.scalar(yaml_tree.get(config, "v1")) == "1"
        name_ = "LMCacheConnectorV1" if v1 else "LMCacheConnector"
        connector = json.dumps({"kv_connector": name_, "kv_role": "kv_both"})
        words += [flag("--kv-transfer-config", enabled), flag(connector, enabled)]
    template = yaml_tree.get(spec, "chatTemplate")
    if template is not None and yaml_tree.scalar(template):
        words += [flag("--chat-template", template), _scalar_word(template, file)]
    env = _production_stack_env(spec, config, lmcache, file)
    label = f"production-stack modelSpec {name} (RayCluster head)"
    return _chart_invocations(words, text, source, env, spec, label, comments, notes)
