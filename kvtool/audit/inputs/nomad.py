"""Nomad job files (HCL): each ``task``'s command, args, image and ``env`` block.

Shape: ``job "x" { group "g" { task "vllm" { driver = "docker" config { image =
"vllm/vllm-openai:v0.9.1" args = ["--model", "...", "--port", "${NOMAD_PORT_http}"] }
env { HF_TOKEN = "..." } } } }`` and ``raw_exec`` tasks with ``command = "bash"``,
``args = ["-c", "..."]`` (https://developer.hashicorp.com/nomad/docs/drivers/docker,
https://github.com/dzianisv/poept server.nomad, https://github.com/defn/dev
m/etc/hello.nomad). A docker task without ``command`` runs its image's entrypoint with
``args``. ``${NOMAD_...}`` interpolations are runtime values. The blocks are found by
brace matching outside strings; a file this reading cannot take is left to the
generic finder.
"""

from __future__ import annotations

import re

from kvtool.audit.inputs import literals
from kvtool.audit.inputs.command_line import ArgvWord
from kvtool.audit.inputs.container import container_invocations
from kvtool.audit.inputs.positions import LineIndex
from kvtool.audit.inputs.shell import ShellContext
from kvtool.audit.inputs.source import ReadSource
from kvtool.audit.model import EnvAssignment, Invocation
from kvtool.releases.images import serve_entrypoint

_BLOCK = re.compile(r"\b(task|config|env)\b\s*(?:\"([^\"]*)\"\s*)?\{")
_ATTRIBUTE = re.compile(r"^[ \t]*([A-Za-z_][A-Za-z0-9_]*)[ \t]*=[ \t]*", re.MULTILINE)


def read(text: str, source: ReadSource) -> list[Invocation]:
    index = LineIndex(text, source.file)
    found: list[Invocation] = []
    for match in _BLOCK.finditer(text):
        if match.group(1) != "task":
            continue
        start, end = match.end(), _closing(text, match.end() - 1)
        found.extend(_task(text, start, end, match.group(2) or "", index, source))
    return found


def _closing(text: str, opening: int) -> int:
    """The offset of the brace closing the one at ``opening`` (strings skipped)."""
    depth = 0
    position = opening
    while position < len(text):
        char = text[position]
        if char == '"':
            literal = literals.string_at(text, position)
            position = literal.end if literal is not None else position + 1
            continue
        if char == "#" or text.startswith("//", position):
            newline = text.find("\n", position)
            position = len(text) if newline < 0 else newline
            continue
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return position
        position += 1
    return len(text)


def _task(
    text: str, start: int, end: int, name: str, index: LineIndex, source: ReadSource
) -> list[Invocation]:
    attributes: dict[str, tuple[int, str]] = {}  # name -> (offset of value, block)
    env: list[EnvAssignment] = []
    for block in _BLOCK.finditer(text, start, end):
        inner_start, inner_end = block.end(), _closing(text, block.end() - 1)
        for attribute in _ATTRIBUTE.finditer(text, inner_start, inner_end):
            if block.group(1) == "env":
                env.extend(_env(text, attribute, index))
            elif block.group(1) == "config":
                attributes[attribute.group(1)] = (attribute.end(), "config")
    for attribute in _ATTRIBUTE.finditer(text, start, end):
        attributes.setdefault(attribute.group(1), (attribute.end(), "task"))
    image = _string(text, attributes.get("image"))
    command = _string(text, attributes.get("command"))
    words: list[ArgvWord] = []
    if command is not None:
        offset = attributes["command"][0]
        literal = literals.string_at(text, offset)
        span = (offset, literal.end if literal else offset)
        words.append(ArgvWord(command, index.location(*span), span))
    args = attributes.get("args")
    if args is not None and text.startswith("[", args[0]):
        words += literals.list_words(text, args[0], index)[0]
    context = ShellContext(
        file=source.file,
        kind="nomad",
        base_dir=source.base_dir,
        env=tuple(env),
        image=image,
        label=f"{source.file or '<input>'}: task {name}",
    )
    entrypoint = () if command is None and image and serve_entrypoint(image) else None
    return container_invocations(words, text, context, image_entrypoint=entrypoint)


def _string(text: str, attribute: tuple[int, str] | None) -> str | None:
    if attribute is None or not text.startswith('"', attribute[0]):
        return None
    literal = literals.string_at(text, attribute[0])
    return literal.value if literal is not None else None


def _env(text: str, attribute: re.Match[str], index: LineIndex) -> list[EnvAssignment]:
    value = _string(text, (attribute.end(), "env"))
    where = index.location(attribute.start(1), attribute.end(1))
    known = value if value is not None and "${" not in value else None
    return [EnvAssignment(name=attribute.group(1), value=known, location=where)]
