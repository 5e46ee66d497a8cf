"""SkyPilot task YAML: the ``run:`` script, with the task's ``envs:`` as its environment.

Shape: a task file with ``resources:``, ``setup:``, ``envs:`` and a ``run: |`` block
(https://docs.skypilot.co/en/latest/reference/yaml-spec.html; vllm-project/vllm
examples/online_serving/run_cluster.sh's SkyPilot neighbours, and skypilot-org/skypilot
llm/vllm/serve.yaml). The script is read by the shell reader with offsets mapped back
into the YAML file.
"""

from __future__ import annotations

import yaml

from kvtool.audit.inputs import yaml_tree
from kvtool.audit.inputs.positions import LineIndex
from kvtool.audit.inputs.shell import ShellContext, read_script
from kvtool.audit.inputs.source import ReadSource
from kvtool.audit.inputs.suppressions import yaml_comment_suppressions
from kvtool.audit.model import EnvAssignment, Invocation


def read(text: str, source: ReadSource) -> list[Invocation]:
    file = source.file
    comments = tuple(yaml_comment_suppressions(text, file))
    found: list[Invocation] = []
    index = LineIndex(text, file)
    for document in yaml_tree.compose_documents(text, file):
        run = yaml_tree.scalar_script(yaml_tree.get(document, "run"), text, index)
        if run is None:
            continue
        script, locate = run
        env = _runtime_env(document, file) + tuple(
            EnvAssignment(
                name=name,
                value=yaml_tree.scalar(value),
                location=yaml_tree.location(key, file),
            )
            for name, key, value in yaml_tree.items(yaml_tree.get(document, "envs"))
        )
        name = yaml_tree.scalar(yaml_tree.get(document, "name"))
        context = ShellContext(
            file=file,
            kind="skypilot",
            base_dir=source.base_dir,
            env=env,
            label=f"{file or '<input>'}: SkyPilot task {name}" if name else None,
            suppressions=comments,
        )
        found.extend(read_script(script, locate, context))
    return found


def _runtime_env(document: yaml.Node, file: str | None) -> tuple[EnvAssignment, ...]:
    """What SkyPilot sets for ``run:`` that the task decides: ``SKYPILOT_NUM_NODES`` from
    ``num_nodes`` (default 1) and ``SKYPILOT_NUM_GPUS_PER_NODE`` from
    ``resources.accelerators`` (``H100:8``, ``{H100: 8}``; a list of candidates only when
    they agree) (https://docs.skypilot.co/en/latest/running-jobs/environment-variables.html).
    """
    found: list[EnvAssignment] = []
    nodes = yaml_tree.get(document, "num_nodes")
    found.append(
        EnvAssignment(
            name="SKYPILOT_NUM_NODES",
            value=yaml_tree.scalar(nodes) if nodes is not None else "1",
            location=yaml_tree.location(nodes, file) if nodes is not None else None,
        )
    )
    accelerators = yaml_tree.get_path(document, "resources", "accelerators")
    counts = _gpu_counts(accelerators)
    if accelerators is not None and len(counts) == 1:
        (count,) = counts
        location = yaml_tree.location(accelerators, file)
        gpus = EnvAssignment(name="SKYPILOT_NUM_GPUS_PER_NODE", value=count, location=location)
        found.append(gpus)
    return tuple(found)


def _gpu_counts(node: yaml.Node | None) -> set[str]:
    """The per-node GPU counts ``accelerators`` allows (``name`` alone is one)."""
    if isinstance(node, yaml.MappingNode):
        return {yaml_tree.scalar(value) or "1" for _, _, value in yaml_tree.items(node)}
    if isinstance(node, yaml.SequenceNode):
        return set().union(*(_gpu_counts(item) for item in node.value)) if node.value else set()
    text = yaml_tree.scalar(node)
    if not text:
        return set()
    candidates = [c.strip() for c in text.strip("{}[]").split(",")] if "," in text else [text]
    return {c.partition(":")[2].strip() or "1" for c in candidates}
