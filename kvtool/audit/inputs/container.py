"""A container's argv written as YAML items (Kubernetes command/args, compose lists).

Each item is one argv word, with no shell in between, unless the words run a
shell (``["/bin/sh", "-c", "vllm serve ..."]``), whose script is read by the shell
reader with its offsets mapped back into the YAML file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

import msgspec
import yaml

from kvtool.audit.inputs import yaml_tree
from kvtool.audit.inputs.command_line import ArgvWord, find_serve, serve_arguments
from kvtool.audit.inputs.huggingface_server import server_tokens
from kvtool.audit.inputs.positions import LineIndex, OffsetMap
from kvtool.audit.inputs.shell import ShellContext, read_script
from kvtool.audit.inputs.shell_lexer import LexError, lex
from kvtool.audit.inputs.vllm_config import referenced_config
from kvtool.audit.model import EnvAssignment, Invocation, Location, SourceToken
from kvtool.errors import KvtoolError

# Kubernetes expands $(VAR) in command/args from the container's env; $$(VAR) escapes it.
_K8S_VAR = re.compile(r"\$\$\(|\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


@dataclass(frozen=True)
class ConfiguredCommand:
    """What an operator or chart runs for a container that writes no ``command``.

    ``words`` come before the container's own ``args``; with ``runs_image_entrypoint``
    they are arguments to the image's entrypoint, else they start with the command.
    """

    words: list[ArgvWord]
    runs_image_entrypoint: bool = False
    consumed_env: tuple[str, ...] = ()  # read by the operator's script, never by vLLM
    notes: tuple[str, ...] = ()  # what the reader could not map, for the report


def words_from_sequence(node: yaml.Node | None, file: str | None) -> list[ArgvWord]:
    words: list[ArgvWord] = []
    for item in yaml_tree.sequence(node):
        text = yaml_tree.scalar(item)
        if text is not None and isinstance(item, yaml.ScalarNode):
            span = yaml_tree.scalar_source_span(item, "")
            words.append(ArgvWord(text, yaml_tree.location(item, file), span))
    return words


def words_from_node(node: yaml.Node | None, text: str, file: str | None) -> list[ArgvWord]:
    """A command/args value: one word per list item, or a string split as a shell line.

    Compose splits a string ``command`` with shell quoting rules (no shell runs); a
    string where Kubernetes wants a list is read the same way, as operators mean it.
    """
    if isinstance(node, yaml.SequenceNode):
        return words_from_sequence(node, file)
    value = yaml_tree.scalar(node)
    if value is None or not isinstance(node, yaml.ScalarNode):
        return []
    start, end = yaml_tree.scalar_source_span(node, text)
    mapping = OffsetMap.align(value, text, start, end)
    index = LineIndex(text, file)
    try:
        lexed = lex(value)
    except LexError as error:
        line, column = index.line_col(mapping.to_source(error.offset))
        raise KvtoolError(f"{file or '<input>'}:{line}:{column}: {error.message}") from None
    words: list[ArgvWord] = []
    for command in lexed.commands:
        for word in command.words:
            span = mapping.to_source(word.start), mapping.to_source(word.end)
            words.append(ArgvWord(word.text, index.location(*span), span))
    return words


def expand_k8s_vars(words: list[ArgvWord], env: tuple[EnvAssignment, ...]) -> list[ArgvWord]:
    """Replace ``$(NAME)`` by literal env values, as the kubelet does before exec."""
    known = {e.name: e.value for e in env if e.value is not None}

    def substitute(match: re.Match[str]) -> str:
        if match.group(0) == "$$(":
            return "$("
        name = match.group(1)
        return known.get(name, match.group(0))

    return [replace(w, text=_K8S_VAR.sub(substitute, w.text)) for w in words]


def container_invocations(
    words: list[ArgvWord],
    source: str,
    context: ShellContext,
    *,
    image_entrypoint: tuple[str, ...] | None,
) -> list[Invocation]:
    """Invocations started by one container's argv.

    ``image_entrypoint``: set when no command/entrypoint override was written and the
    image's own entrypoint starts a vLLM server (``()`` for an image that is not in the
    input, e.g. a patch); ``words`` are then its serve arguments.
    """
    texts = [w.text for w in words]
    match = find_serve(texts)
    if match is not None and match.kind == "shell":
        if match.args_start >= len(words):
            return []
        arguments = words[match.args_start + 1 :]
        positional = tuple(SourceToken(text=w.text, location=w.location) for w in arguments)
        return _shell_item(
            words[match.args_start], source, msgspec.structs.replace(context, positional=positional)
        )
    if match is not None:
        served = serve_arguments(texts, match)
        image = match.image or context.image
        env = context.env + tuple(
            EnvAssignment(
                name=t.partition("=")[0], value=t.partition("=")[2], location=words[i].location
            )
            for i, t in sorted(match.env.items())
        )
    elif image_entrypoint is not None:
        served, image, env = list(range(len(words))), context.image, context.env
    else:
        return []
    tokens = [SourceToken(text=words[i].text, location=words[i].location) for i in served]
    server_notes: tuple[str, ...] = ()
    if match is not None and match.huggingface_server:
        mapped = server_tokens(tokens, words[match.program].location)
        if mapped is None:
            return []
        tokens, server_notes = mapped
    items, notes = referenced_config(tuple(tokens), context.base_dir, context.written)
    notes += server_notes
    if match is not None and match.note is not None:
        notes += (match.note,)
    return [
        Invocation(
            kind=context.kind,
            label=context.label or (context.file or "<input>"),
            file=context.file,
            tokens=tuple(tokens),
            env=env,
            image=image,
            suppressions=context.suppressions,
            config_items=items,
            notes=notes,
        )
    ]


def _shell_item(word: ArgvWord, source: str, context: ShellContext) -> list[Invocation]:
    index = LineIndex(source, context.file)
    start, end = word.span if word.span is not None else (0, len(source))
    mapping = OffsetMap.align(word.text, source, start, end)

    def locate(start: int, end: int) -> Location:
        return index.location(mapping.to_source(start), mapping.to_source(end))

    return read_script(word.text, locate, context)
