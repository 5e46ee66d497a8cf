"""Shell scripts (and shell strings embedded in YAML): every ``vllm serve`` with its environment.

The same reader serves ``command: ["/bin/sh", "-c", "vllm serve ..."]`` in a
manifest: the caller passes a ``locate`` function that maps offsets in the embedded
string back to the manifest, so tokens still point at the right line and column.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import msgspec

from kvtool.audit.inputs.command_line import ServeMatch, find_serve, serve_arguments
from kvtool.audit.inputs.docker_resources import docker_run_resources
from kvtool.audit.inputs.huggingface_server import server_tokens
from kvtool.audit.inputs.positions import LineIndex, OffsetMap
from kvtool.audit.inputs.shell_lexer import Command, Comment, LexError, Word, lex
from kvtool.audit.inputs.source import ReadSource
from kvtool.audit.inputs.suppressions import parse_comment
from kvtool.audit.inputs.vllm_config import WrittenFile, referenced_config
from kvtool.audit.model import (
    EnvAssignment,
    InputKind,
    Invocation,
    Location,
    SourceToken,
    Suppression,
)
from kvtool.errors import KvtoolError

Locate = Callable[[int, int], Location]
# Words standing for "whatever arguments the wrapper got": unknown, possibly none.
_PASS_THROUGH = frozenset({"$@", "$*", "${@}", "${*}"})
_SCRIPT_NAME = frozenset({"$0", "${0}"})


class ShellContext(msgspec.Struct, frozen=True):
    """What the surrounding input knows: file, kind, environment and image."""

    file: str | None
    kind: InputKind = "shell"
    base_dir: Path | None = None
    env: tuple[EnvAssignment, ...] = ()
    image: str | None = None
    label: str | None = None  # label prefix, e.g. "deploy.yaml: Deployment/vllm container vllm"
    suppressions: tuple[Suppression, ...] = msgspec.field(default_factory=tuple)
    # Files the script writes with here-documents, for `--config` of such a file.
    written: dict[str, WrittenFile] = msgspec.field(default_factory=dict)
    # `sh -c SCRIPT NAME ARGS...` in a container: NAME is the script's $0 and ARGS its
    # "$@" (a DynamoGraphDeployment's `command: [sh, -c, 'exec ... "$@"', --]` + `args`).
    # None when the script's arguments are not known (a script file).
    positional: tuple[SourceToken, ...] | None = None


def read(text: str, source: ReadSource) -> list[Invocation]:
    return read_shell_file(text, source.file, source.base_dir)


def read_shell_file(text: str, file: str | None, base_dir: Path | None) -> list[Invocation]:
    index = LineIndex(text, file)
    context = ShellContext(file=file, base_dir=base_dir, written=heredoc_files(text, file))
    return read_script(text, index.location, context)


# `cat > F <<EOF`, `cat <<EOF > F`, `tee F <<EOF` (quoted or <<- delimiters too).
_HEREDOC_WRITE = re.compile(
    r"""\b(?:cat\s*>\s*(?P<a>[^\s<;|&]+)\s*<<-?\s*(?P<qa>['"]?)(?P<da>\w+)(?P=qa)"""
    r"""|cat\s*<<-?\s*(?P<qb>['"]?)(?P<db>\w+)(?P=qb)\s*>\s*(?P<b>[^\s;|&]+)"""
    r"""|tee\s+(?P<c>[^\s<;|&-][^\s<;|&]*)\s*<<-?\s*(?P<qc>['"]?)(?P<dc>\w+)(?P=qc))[^\n]*\n"""
)


def heredoc_files(text: str, file: str | None) -> dict[str, WrittenFile]:
    """The files ``text`` writes with a here-document, by the path written."""
    found: dict[str, WrittenFile] = {}
    for match in _HEREDOC_WRITE.finditer(text):
        path = match.group("a") or match.group("b") or match.group("c")
        delimiter = match.group("da") or match.group("db") or match.group("dc")
        body_start = match.end()
        end = re.compile(rf"^[ \t]*{re.escape(delimiter)}[ \t]*$", re.MULTILINE).search(
            text, body_start
        )
        body = text[body_start : end.start() if end else len(text)]
        first_line = text.count("\n", 0, body_start) + 1
        found[path] = WrittenFile(body, file, first_line)
    return found


def read_script(text: str, locate: Locate, context: ShellContext) -> list[Invocation]:
    """Every vLLM server start in ``text``; ``locate(start, end)`` turns offsets into Locations."""
    try:
        lexed = lex(text, _inherited_variables(context))
    except LexError as error:
        where = locate(error.offset, error.offset)
        raise KvtoolError(
            f"{where.file or '<input>'}:{where.line}:{where.column}: {error.message}"
        ) from None
    found: list[Invocation] = []
    comments = sorted(lexed.comments, key=lambda c: c.start)  # once: each command bisects
    for command in lexed.commands:
        words = [w.text for w in command.words]
        match = find_serve(words)
        if match is None:
            continue
        if match.kind == "shell":
            if match.args_start < len(command.words):
                # The nested script's $0 and "$@" are the words after it, not ours.
                arguments = command.words[match.args_start + 1 :]
                positional = tuple(
                    SourceToken(text=w.text, location=locate(w.start, w.end)) for w in arguments
                )
                inner = msgspec.structs.replace(context, positional=positional)
                found.extend(_nested(text, command.words[match.args_start], locate, inner))
            continue
        invocation = _invocation(command, match, locate, context, comments)
        if invocation is not None:
            found.append(invocation)
    found.extend(_written_scripts(text, locate, context))
    return found


# Files a here-document writes that are data, not scripts a server may start from.
_DATA_SUFFIXES = (".yaml", ".yml", ".json", ".toml", ".txt", ".conf", ".cfg", ".ini", ".env")


def _written_scripts(text: str, locate: Locate, context: ShellContext) -> list[Invocation]:
    """Servers started by a script this one writes with a here-document (``cat <<EOF >
    run.sh``), read where its lines are written; the lexer passes here-document bodies
    over as data."""
    if "<<" not in text or "vllm" not in text:
        return []
    found: list[Invocation] = []
    for match in _HEREDOC_WRITE.finditer(text):
        path = match.group("a") or match.group("b") or match.group("c")
        if path.lower().endswith(_DATA_SUFFIXES):
            continue
        delimiter = match.group("da") or match.group("db") or match.group("dc")
        body_start = match.end()
        end = re.compile(rf"^[ \t]*{re.escape(delimiter)}[ \t]*$", re.MULTILINE).search(
            text, body_start
        )
        body = text[body_start : end.start() if end else len(text)]
        if "vllm" not in body:
            continue

        def shifted(start: int, finish: int, base: int = body_start) -> Location:
            return locate(base + start, base + finish)

        written = msgspec.structs.replace(
            context, label=f"{context.label or context.file or '<input>'}: written to {path}"
        )
        try:
            found.extend(read_script(body, shifted, written))
        except KvtoolError:
            continue  # a template of a script (unbalanced quotes until expanded)
    return found


def _inherited_variables(context: ShellContext) -> dict[str, str]:
    """The environment the script starts with, known values only: a container's ``env``
    for its ``sh -c``, a SkyPilot task's ``envs``. Compose substitutes ``$VAR`` in its
    file from the host's environment before any shell runs, so its services give none."""
    if context.kind == "compose":
        return {}
    return {e.name: e.value for e in context.env if e.value is not None and not e.conditional}


def _nested(outer: str, script: Word, locate: Locate, context: ShellContext) -> list[Invocation]:
    """``sh -c 'vllm serve ...'``: read the script word with offsets mapped back."""
    if (
        outer.startswith("'", script.start)
        and outer[script.start + 1 : script.end - 1] == script.text
    ):
        mapping = OffsetMap.identity(script.start + 1)
    else:
        mapping = OffsetMap.align(script.text, outer, script.start, script.end)

    def inner_locate(start: int, end: int) -> Location:
        return locate(mapping.to_source(start), mapping.to_source(end))

    return read_script(script.text, inner_locate, context)


def _invocation(
    command: Command,
    match: ServeMatch,
    locate: Locate,
    context: ShellContext,
    comments: list[Comment],
) -> Invocation | None:
    """The invocation ``command`` starts; None when it starts no vLLM engine after all
    (KServe's Hugging Face server on another backend)."""
    tokens = _argument_tokens(command, match, locate, context)
    program = locate(command.words[match.program].start, command.words[match.program].end)
    server_notes: tuple[str, ...] = ()
    if match.huggingface_server:
        mapped = server_tokens(tokens, program)
        if mapped is None:
            return None
        tokens, server_notes = mapped
    env = list(context.env)
    for name, word in command.exported.items():
        env.append(_assignment(word, locate, fallback_name=name))
    for position in sorted(match.env):
        env.append(_assignment(command.words[position], locate))
    first_line = locate(command.words[0].start, command.words[0].end).line
    last_line = locate(command.words[-1].start, command.words[-1].end).line
    items, notes = referenced_config(tuple(tokens), context.base_dir, context.written)
    sizing_notes: list[str] = []
    resources = docker_run_resources(
        match,
        [w.text for w in command.words],
        lambda index: locate(command.words[index].start, command.words[index].end),
        sizing_notes,
    )
    notes += server_notes
    if match.note is not None:
        notes += (match.note,)
    where = f"{context.file or '<input>'}:{program.line}"
    label = f"{context.label} ({where})" if context.label else where
    return Invocation(
        kind=context.kind,
        label=label,
        file=context.file,
        tokens=tuple(tokens),
        env=tuple(env),
        image=match.image or context.image,
        suppressions=context.suppressions
        + tuple(_command_suppressions(comments, locate, first_line, last_line)),
        config_items=items,
        notes=notes + tuple(sizing_notes),
        resources=resources,
    )


def _argument_tokens(
    command: Command, match: ServeMatch, locate: Locate, context: ShellContext
) -> list[SourceToken]:
    """The words vLLM's parser reads: "$@"/$0 replaced by the script's known arguments
    (dropped when unknown), then a wrapper's own options taken out."""
    start = match.args_start
    tokens: list[SourceToken] = []
    for word in command.words[start:]:
        if word.dynamic and word.text in _PASS_THROUGH:
            tokens.extend(context.positional[1:] if context.positional is not None else ())
        elif word.dynamic and context.positional and word.text in _SCRIPT_NAME:
            tokens.append(context.positional[0])
        else:
            where = locate(word.start, word.end)
            tokens.append(SourceToken(text=word.text, location=where, conditional=word.conditional))
    texts = [w.text for w in command.words[:start]] + [t.text for t in tokens]
    return [tokens[index - start] for index in serve_arguments(texts, match)]


def _assignment(word: Word, locate: Locate, fallback_name: str | None = None) -> EnvAssignment:
    name, _, value = word.text.partition("=")
    return EnvAssignment(
        name=name or (fallback_name or ""),
        value=None if word.dynamic else value,
        location=locate(word.start, word.end),
        conditional=word.conditional,
    )


def _command_suppressions(
    comments: list[Comment],
    locate: Locate,
    first_line: int | None,
    last_line: int | None,
) -> list[Suppression]:
    """Trailing comments on the command's lines, and the comment block right above it.

    ``comments`` are sorted by offset (so by line); only those up to the command's last
    line are looked at (found by bisection), newest first, and the walk stops below the
    block above the command, so many commented commands are read in linear time.
    """
    if first_line is None or last_line is None:
        return []
    found: list[Suppression] = []
    above = first_line - 1
    last = bisect.bisect_right(comments, last_line, key=lambda c: locate(c.start, c.end).line or 0)
    for position in range(last - 1, -1, -1):
        comment = comments[position]
        where = locate(comment.start, comment.end)
        if where.line is None:
            continue
        if where.line < above:
            break
        parsed = parse_comment(comment.text)
        if comment.trailing and first_line <= where.line <= last_line:
            if parsed:
                found.append(_suppression(parsed, where, "line", where.line))
        elif not comment.trailing and where.line == above:
            above -= 1
            if parsed:
                found.append(_suppression(parsed, where, "invocation", None))
    return list(reversed(found))


def _suppression(
    parsed: tuple[tuple[str, ...], str | None],
    where: Location,
    scope: Literal["line", "invocation"],
    target_line: int | None,
) -> Suppression:
    codes, reason = parsed
    return Suppression(
        codes=codes, reason=reason, location=where, scope=scope, target_line=target_line
    )
