"""docker compose files: the vLLM services, their command, entrypoint, environment and image.

A string ``command``/``entrypoint`` is split like a shell line (compose splits it
with shell quoting rules, without running a shell); a list is one word per item.
With no ``entrypoint`` override, a vLLM image's own entrypoint (``vllm serve``)
receives the command as its arguments.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from pathlib import Path

import msgspec
import yaml

from kvtool.audit.inputs import compose_env, yaml_tree
from kvtool.audit.inputs.command_line import ArgvWord
from kvtool.audit.inputs.container import container_invocations, words_from_node
from kvtool.audit.inputs.container_resources import service_resources
from kvtool.audit.inputs.shell import ShellContext
from kvtool.audit.inputs.source import ReadSource
from kvtool.audit.inputs.suppressions import yaml_comment_suppressions
from kvtool.audit.model import EnvAssignment, Invocation
from kvtool.releases.images import serve_entrypoint


def read(text: str, source: ReadSource) -> list[Invocation]:
    return read_compose(text, source.file, source.base_dir)


DOTENV_NOTE = "compose variables taken from {dotenv}: {names}"


def read_compose(text: str, file: str | None, base_dir: Path | None) -> list[Invocation]:
    comments = tuple(yaml_comment_suppressions(text, file))
    project = os.path.dirname(file) or "." if file and not file.startswith("<") else None
    dotenv = compose_env.dotenv(project) if project is not None else {}
    found: list[Invocation] = []
    for document in yaml_tree.compose_documents(text, file):
        duplicates = tuple(yaml_tree.duplicate_keys(document, file))
        services = yaml_tree.get(document, "services")
        for name, _, service in yaml_tree.items(services):
            first, last = service.start_mark.line + 1, service.end_mark.line + 1
            image = yaml_tree.scalar(yaml_tree.get(service, "image"))
            entrypoint_node = yaml_tree.get(service, "entrypoint")
            words = words_from_node(entrypoint_node, text, file) + words_from_node(
                yaml_tree.get(service, "command"), text, file
            )
            words, taken = _interpolated(words, dotenv)
            context = ShellContext(
                file=file,
                kind="compose",
                base_dir=base_dir,
                env=tuple(_environment(yaml_tree.get(service, "environment"), file)),
                image=image,
                label=f"{file or '<input>'}: service {name}",
                suppressions=tuple(
                    c for c in comments if c.target_line and first <= c.target_line <= last
                ),
            )
            notes: list[str] = []
            if taken:
                where = os.path.join(project or ".", ".env")
                notes.append(DOTENV_NOTE.format(dotenv=where, names=", ".join(sorted(taken))))
            resources = service_resources(service, file, notes)
            found.extend(
                msgspec.structs.replace(
                    i, notes=i.notes + duplicates + tuple(notes), resources=resources
                )
                for i in container_invocations(
                    words,
                    text,
                    context,
                    image_entrypoint=serve_entrypoint(image)
                    if entrypoint_node is None and image
                    else None,
                )
            )
    return found


def _interpolated(words: list[ArgvWord], dotenv: dict[str, str]) -> tuple[list[ArgvWord], set[str]]:
    """The words with each ``${NAME}`` the project's ``.env`` gives replaced, as compose
    does before the container starts (their positions stay where the variable is written),
    and the names used; a word with a variable ``.env`` does not give stays as written."""
    if not dotenv:
        return words, set()
    taken: set[str] = set()
    out: list[ArgvWord] = []
    for word in words:
        names = compose_env.names_in(word.text) if "$" in word.text else []
        value = compose_env.interpolate(word.text, dotenv) if names else None
        if value is None:
            out.append(word)
            continue
        taken.update(n for n in names if n in dotenv)
        out.append(dataclasses.replace(word, text=value))
    return out, taken


def _environment(node: yaml.Node | None, file: str | None) -> Iterator[EnvAssignment]:
    """``environment:`` as a list of ``NAME=value`` or as a mapping (null: taken from the host)."""
    for item in yaml_tree.sequence(node):
        text = yaml_tree.scalar(item)
        if text is None:
            continue
        name, has_value, value = text.partition("=")
        yield EnvAssignment(
            name=name, value=value if has_value else None, location=yaml_tree.location(item, file)
        )
    for name, key_node, value_node in yaml_tree.items(node):
        yield EnvAssignment(
            name=name,
            value=yaml_tree.scalar(value_node),
            location=yaml_tree.location(key_node, file),
        )
