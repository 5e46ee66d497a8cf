"""dstack run configurations (``.dstack.yml``): ``commands:`` with ``env:`` and ``image:``.

Shape: ``type: service`` (or ``task``) with ``env:`` as a list of ``NAME=value`` (or a
bare ``NAME`` taken from the caller's environment) and ``commands:`` whose items run
in one shell, e.g. ``- vllm serve $MODEL_ID`` continued over plain lines with
``--tensor-parallel-size $DSTACK_GPUS_NUM`` (https://github.com/dstackai/dstack
docs/docs/services.md and examples/deployment/vllm/serve.dstack.yml). dstack sets
``DSTACK_GPUS_NUM`` and friends when the run starts: runtime values.
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
    index = LineIndex(text, file)
    comments = tuple(yaml_comment_suppressions(text, file))
    found: list[Invocation] = []
    for document in yaml_tree.compose_documents(text, file):
        name = yaml_tree.scalar(yaml_tree.get(document, "name"))
        context = ShellContext(
            file=file,
            kind="dstack",
            base_dir=source.base_dir,
            env=_env(yaml_tree.get(document, "env"), file),
            image=yaml_tree.scalar(yaml_tree.get(document, "image")),
            label=f"{file or '<input>'}: dstack run {name}" if name else None,
            suppressions=comments,
        )
        for item in yaml_tree.sequence(yaml_tree.get(document, "commands")):
            run = yaml_tree.scalar_script(item, text, index)
            if run is not None:
                found.extend(read_script(run[0], run[1], context))
    return found


def _env(node: yaml.Node | None, file: str | None) -> tuple[EnvAssignment, ...]:
    found: list[EnvAssignment] = []
    if isinstance(node, yaml.SequenceNode):
        for item in node.value:
            written = yaml_tree.scalar(item) or ""
            name, has_value, value = written.partition("=")
            where = yaml_tree.location(item, file)
            known = value if has_value else None
            found.append(EnvAssignment(name=name, value=known, location=where))
    for name, key, value_node in yaml_tree.items(node):
        where = yaml_tree.location(key, file)
        found.append(EnvAssignment(name=name, value=yaml_tree.scalar(value_node), location=where))
    return tuple(found)
