"""KAITO inference ConfigMaps: ``inference_config.yaml`` embedded in a ConfigMap data key.

KAITO passes the keys of its ``vllm:`` section to vLLM as flags (dashed names, as
in its shipped ``inference-params-template``), beneath the arguments it generates
itself, so they behave like ``--config`` items. Other top-level keys are KAITO's
own settings (``kv_cache_cpu_memory_utilization``, ``max_probe_steps``), kept in
``Invocation.settings`` for the sizing rules.
"""

from __future__ import annotations

from typing import Any

import yaml

from kvtool.audit.inputs import yaml_tree
from kvtool.audit.inputs.positions import LineIndex, OffsetMap
from kvtool.audit.inputs.source import ReadSource
from kvtool.audit.inputs.suppressions import yaml_comment_suppressions
from kvtool.audit.model import Invocation, Location, Suppression
from kvtool.errors import KvtoolError

VLLM_SECTION = "vllm"


def read(text: str, source: ReadSource) -> list[Invocation]:
    return read_kaito(text, source.file)


def read_kaito(text: str, file: str | None) -> list[Invocation]:
    """Every KAITO inference ConfigMap in a (multi-document) file; none is an error."""
    comments = yaml_comment_suppressions(text, file)
    found: list[Invocation] = []
    configmaps = 0
    for document in yaml_tree.compose_documents(text, file):
        if yaml_tree.scalar(yaml_tree.get(document, "kind")) == "ConfigMap":
            configmaps += 1
            found.extend(read_configmap(document, text, file, comments))
    if not found:
        raise KvtoolError(
            f"{file or '<input>'}: no KAITO inference ConfigMap (a data key holding YAML "
            f"with a '{VLLM_SECTION}:' section) among {configmaps} ConfigMap(s)"
        )
    return found


def is_inference_config(value: str) -> bool:
    """Cheap check used by detection: a data value that is YAML with a top-level vllm: key."""
    return any(line.startswith(f"{VLLM_SECTION}:") for line in value.splitlines())


def read_configmap(
    root: yaml.Node, text: str, file: str | None, comments: list[Suppression]
) -> list[Invocation]:
    """One invocation per data key that holds an inference config; other ConfigMaps give none."""
    name = yaml_tree.scalar(yaml_tree.get_path(root, "metadata", "name")) or "?"
    found: list[Invocation] = []
    for key, _, value_node in yaml_tree.items(yaml_tree.get(root, "data")):
        value = yaml_tree.scalar(value_node)
        if value is None or not isinstance(value_node, yaml.ScalarNode):
            continue
        if not key.endswith((".yaml", ".yml")) or not is_inference_config(value):
            continue
        found.append(
            _inference_config(value, value_node, text, file, f"ConfigMap/{name} {key}", comments)
        )
    return found


def _inference_config(
    value: str,
    value_node: yaml.ScalarNode,
    text: str,
    file: str | None,
    where: str,
    comments: list[Suppression],
) -> Invocation:
    start, end = yaml_tree.scalar_source_span(value_node, text)
    mapping = OffsetMap.align(value, text, start, end)
    index = LineIndex(text, file)

    def locate(node: yaml.Node) -> Location:
        begin = mapping.to_source(node.start_mark.index)
        return index.location(begin, mapping.to_source(node.end_mark.index))

    inner_name = f"{file or '<input>'} ({where})"
    documents = yaml_tree.compose_documents(value, inner_name)
    root = documents[0] if documents else None
    items: list[tuple[str, Any, Location | None]] = []
    settings: dict[str, tuple[Any, Location | None]] = {}
    for key, key_node, node in yaml_tree.items(root):
        if key == VLLM_SECTION:
            for flag, flag_node, flag_value in yaml_tree.items(node):
                items.append((flag, yaml_tree.construct(flag_value, inner_name), locate(flag_node)))
        else:
            settings[key] = (yaml_tree.construct(node, inner_name), locate(key_node))
    first = index.line_col(start)[0]
    last = index.line_col(end)[0]
    return Invocation(
        kind="kaito",
        label=f"{file or '<input>'}: {where}",
        file=file,
        config_items=tuple(items),
        settings=settings,
        suppressions=tuple(c for c in comments if c.target_line and first <= c.target_line <= last),
    )
