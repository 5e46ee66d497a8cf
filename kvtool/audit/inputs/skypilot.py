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
from kvtool.audit.inputs.positions import LineIndex, OffsetMap
from kvtool.audit.inputs.shell import ShellContext, read_script
from kvtool.audit.inputs.source import ReadSource
from kvtool.audit.inputs.suppressions import yaml_comment_suppressions
from kvtool.audit.model import EnvAssignment, Invocation, Location


def read(text: str, source: ReadSource) -> list[Invocation]:
    file = source.file
    comments = tuple(yaml_comment_suppressions(text, file))
    found: list[Invocation] = []
    index = LineIndex(text, file)
    for document in yaml_tree.compose_documents(text, file):
        run = yaml_tree.get(document, "run")
        script = yaml_tree.scalar(run)
        if script is None or not isinstance(run, yaml.ScalarNode):
            continue
        start, end = yaml_tree.scalar_source_span(run, text)
        mapping = OffsetMap.align(script, text, start, end)

        def locate(begin: int, finish: int, mapping: OffsetMap = mapping) -> Location:
            return index.location(mapping.to_source(begin), mapping.to_source(finish))

        env = tuple(
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
