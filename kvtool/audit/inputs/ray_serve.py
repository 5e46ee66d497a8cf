"""Ray: Serve LLM applications in a RayService's ``serveConfigV2``, a RayJob's entrypoint.

``import_path: ray.serve.llm:build_openai_app`` starts vLLM's OpenAI server with each
``args.llm_configs[].engine_kwargs`` passed to vLLM's engine arguments
(https://docs.ray.io/en/latest/serve/llm/serving-llms.html; ray-project/kuberay
ray-operator/config/samples/vllm-serve-llm samples). The kwargs are engine-argument
names, so each one is read like a ``--config`` item (``tensor_parallel_size: 2`` is
``--tensor-parallel-size 2``), at the line it was written in the embedded YAML. An
application whose ``import_path`` is user code is not readable and gives nothing.
"""

from __future__ import annotations

from typing import Any

import yaml

from kvtool.audit.inputs import yaml_tree
from kvtool.audit.inputs.positions import LineIndex, OffsetMap
from kvtool.audit.inputs.shell import ShellContext, read_script
from kvtool.audit.inputs.source import ReadSource
from kvtool.audit.model import Invocation, Location, Suppression

SERVE_LLM = "ray.serve.llm"


def read_serve_config(
    node: yaml.Node,
    text: str,
    source: ReadSource,
    owner: str,
    suppressions: tuple[Suppression, ...],
) -> list[Invocation]:
    """One invocation per Ray Serve LLM config in ``spec.serveConfigV2``; none otherwise."""
    value_node = yaml_tree.get_path(node, "spec", "serveConfigV2")
    value = yaml_tree.scalar(value_node)
    if value is None or not isinstance(value_node, yaml.ScalarNode) or SERVE_LLM not in value:
        return []
    start, end = yaml_tree.scalar_source_span(value_node, text)
    mapping = OffsetMap.align(value, text, start, end)
    index = LineIndex(text, source.file)

    def locate(inner: yaml.Node) -> Location:
        begin = mapping.to_source(inner.start_mark.index)
        return index.location(begin, mapping.to_source(inner.end_mark.index))

    inner_name = f"{source.file or '<input>'} (serveConfigV2)"
    documents = yaml_tree.compose_documents(value, inner_name)
    found: list[Invocation] = []
    root = documents[0] if documents else None
    for app in yaml_tree.sequence(yaml_tree.get(root, "applications")):
        if not (yaml_tree.scalar(yaml_tree.get(app, "import_path")) or "").startswith(SERVE_LLM):
            continue
        app_name = yaml_tree.scalar(yaml_tree.get(app, "name")) or "?"
        for config in yaml_tree.sequence(yaml_tree.get_path(app, "args", "llm_configs")):
            items: list[tuple[str, Any, Location | None]] = []
            loading = yaml_tree.get(config, "model_loading_config")
            model = yaml_tree.get(loading, "model_source") or yaml_tree.get(loading, "model_id")
            if model is not None:
                items.append(("model", yaml_tree.scalar(model), locate(model)))
            for key, key_node, kwarg in yaml_tree.items(yaml_tree.get(config, "engine_kwargs")):
                flag = key.replace("_", "-")
                items.append((flag, yaml_tree.construct(kwarg, inner_name), locate(key_node)))
            found.append(
                Invocation(
                    kind="kubernetes",
                    label=f"{source.file or '<input>'}: {owner} Ray Serve LLM app {app_name}",
                    file=source.file,
                    config_items=tuple(items),
                    suppressions=suppressions,
                    notes=("Ray Serve LLM passes engine_kwargs to vLLM's engine arguments",),
                )
            )
    return found


def read_job_entrypoint(
    node: yaml.Node,
    text: str,
    source: ReadSource,
    owner: str,
    suppressions: tuple[Suppression, ...],
) -> list[Invocation]:
    """A RayJob's ``spec.entrypoint``: the shell command Ray runs on the head node
    (ray-project/kuberay ray-operator/config/samples/ray-job.*.yaml)."""
    entry = yaml_tree.get_path(node, "spec", "entrypoint")
    script = yaml_tree.scalar(entry)
    if script is None or not isinstance(entry, yaml.ScalarNode):
        return []
    start, end = yaml_tree.scalar_source_span(entry, text)
    mapping = OffsetMap.align(script, text, start, end)
    index = LineIndex(text, source.file)

    def locate(begin: int, finish: int) -> Location:
        return index.location(mapping.to_source(begin), mapping.to_source(finish))

    context = ShellContext(
        file=source.file,
        kind="kubernetes",
        base_dir=source.base_dir,
        label=f"{source.file or '<input>'}: {owner} entrypoint",
        suppressions=suppressions,
    )
    return read_script(script, locate, context)
