"""cloud-init user data (``#cloud-config``): ``runcmd``/``bootcmd`` and ``write_files``.

Shape: ``runcmd:`` items that are either a string run by ``sh -c`` or a list run as
argv (``- [vllm, serve, MODEL, --port, "8000"]``), and ``write_files:`` entries whose
``content: |`` is a start script or a unit the commands then run
(https://cloudinit.readthedocs.io/en/latest/reference/modules.html#runcmd and
#write-files; GPU VM user data that installs vLLM and starts it from ``runcmd``).
A written file is read as a script when it starts a server; its path is kept so a
command's ``--config`` of a written file resolves.
"""

from __future__ import annotations

import yaml

from kvtool.audit.inputs import yaml_tree
from kvtool.audit.inputs.container import container_invocations, words_from_sequence
from kvtool.audit.inputs.positions import LineIndex
from kvtool.audit.inputs.shell import ShellContext, read_script
from kvtool.audit.inputs.source import ReadSource
from kvtool.audit.inputs.suppressions import yaml_comment_suppressions
from kvtool.audit.inputs.vllm_config import WrittenFile
from kvtool.audit.model import Invocation

_COMMAND_KEYS = ("bootcmd", "runcmd")


def read(text: str, source: ReadSource) -> list[Invocation]:
    file = source.file
    index = LineIndex(text, file)
    found: list[Invocation] = []
    for document in yaml_tree.compose_documents(text, file):
        written: dict[str, WrittenFile] = {}
        scripts: list[tuple[str, yaml.Node]] = []
        for entry in yaml_tree.sequence(yaml_tree.get(document, "write_files")):
            path = yaml_tree.scalar(yaml_tree.get(entry, "path")) or ""
            content = yaml_tree.get(entry, "content")
            body = yaml_tree.scalar(content)
            if body is None or content is None:
                continue
            written[path] = WrittenFile(body, file, content.start_mark.line + 2)
            scripts.append((path, content))
        context = ShellContext(
            file=file,
            kind="cloud-init",
            base_dir=source.base_dir,
            written=written,
            suppressions=tuple(yaml_comment_suppressions(text, file)),
        )
        for key in _COMMAND_KEYS:
            for item in yaml_tree.sequence(yaml_tree.get(document, key)):
                if isinstance(item, yaml.SequenceNode):
                    words = words_from_sequence(item, file)
                    found.extend(container_invocations(words, text, context, image_entrypoint=None))
                    continue
                run = yaml_tree.scalar_script(item, text, index)
                if run is not None:
                    found.extend(read_script(run[0], run[1], context))
        for path, content in scripts:
            run = yaml_tree.scalar_script(content, text, index)
            if run is None or "vllm" not in run[0] or path.endswith((".yaml", ".yml", ".json")):
                continue
            labelled = ShellContext(
                file=file,
                kind="cloud-init",
                base_dir=source.base_dir,
                written=written,
                label=f"{file or '<input>'}: write_files {path}",
            )
            found.extend(read_script(run[0], run[1], labelled))
    return found
