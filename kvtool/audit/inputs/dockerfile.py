"""Dockerfile/Containerfile: the server the final stage's ENTRYPOINT and CMD start.

Docker's rules: the last ENTRYPOINT and the last CMD of the final stage apply; an
exec-form (JSON array) ENTRYPOINT receives the exec-form CMD as arguments; a
shell-form instruction runs ``/bin/sh -c`` on its text; with no ENTRYPOINT the base
image's entrypoint applies (from the image table), and ``ENTRYPOINT []`` clears it
(https://docs.docker.com/reference/dockerfile/#understand-how-cmd-and-entrypoint-interact).

The final stage's ``ENV`` lines (``ENV VLLM_USE_V1=1``, the legacy ``ENV NAME value``)
are the server's environment, as a shell ``export`` is a script's; ``ARG`` defaults are
build-time only, so they reach the server only through an ``ENV`` that names them
(``ENV LMCACHE_MAX_LOCAL_CPU_SIZE=${CPU_SIZE}``); an ``ARG`` without a default, or a
build argument given elsewhere, is a runtime value
(https://docs.docker.com/reference/dockerfile/#env, #arg).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from kvtool.audit.inputs.command_line import ArgvWord
from kvtool.audit.inputs.container import container_invocations
from kvtool.audit.inputs.positions import LineIndex
from kvtool.audit.inputs.shell import ShellContext, read_script
from kvtool.audit.inputs.shell_lexer import LexError, lex
from kvtool.audit.inputs.source import ReadSource
from kvtool.audit.model import EnvAssignment, Invocation, Location
from kvtool.nesting import loads_json
from kvtool.releases.images import serve_entrypoint

_INSTRUCTION = re.compile(r"^[ \t]*([A-Za-z]+)[ \t]+", re.MULTILINE)
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_FROM = re.compile(r"(?:--\S+\s+)*(\S+)")
# Parser directives: ``# name=value`` lines before any instruction, comment or blank
# line (https://docs.docker.com/reference/dockerfile/#parser-directives).
_DIRECTIVE = re.compile(r"#[ \t]*([A-Za-z]+)[ \t]*=[ \t]*(\S*)[ \t]*\r?\n")
_BACKTICK_CONTINUATION = re.compile(r"`(?=[ \t]*\r?\n)")


def _escape_character(text: str) -> str:
    """The ``# escape=`` parser directive's character, ``\\`` by default."""
    position = 0
    while match := _DIRECTIVE.match(text, position):
        if match.group(1).lower() == "escape" and match.group(2) in ("`", "\\"):
            return match.group(2)
        position = match.end()
    return "\\"


def _backslash_continuations(text: str) -> str:
    """``text`` with the backtick continuations of ``# escape=``` ` spelled as backslashes,
    offset for offset, so one reader handles both (Windows images use the backtick)."""
    if _escape_character(text) != "`":
        return text
    return _BACKTICK_CONTINUATION.sub(lambda _: "\\", text)


@dataclass(frozen=True)
class _Instruction:
    keyword: str
    start: int  # offset of the body (after the keyword)
    end: int  # end of the body, continuation lines included

    def body(self, text: str) -> str:
        return text[self.start : self.end]


def read(text: str, source: ReadSource) -> list[Invocation]:
    text = _backslash_continuations(text)
    index = LineIndex(text, source.file)
    stage = _final_stage(_instructions(text))
    base = next((i for i in stage if i.keyword == "FROM"), None)
    entrypoint = next((i for i in reversed(stage) if i.keyword == "ENTRYPOINT"), None)
    command = next((i for i in reversed(stage) if i.keyword == "CMD"), None)
    base_image = None
    if base is not None:
        match = _FROM.match(base.body(text).strip())
        base_image = match.group(1) if match else None
    context = ShellContext(
        file=source.file,
        kind="dockerfile",
        base_dir=source.base_dir,
        image=base_image,
        env=_environment(stage, text, index),
    )
    if entrypoint is not None:
        words = _exec_words(entrypoint, text, index)
        if words is None:
            return _shell(entrypoint, text, index, context)  # CMD is ignored then
        if command is not None:
            words += _exec_words(command, text, index) or []
        return container_invocations(words, text, context, image_entrypoint=None)
    if command is None:
        return []
    words = _exec_words(command, text, index)
    if words is None:
        return _shell(command, text, index, context)
    inherited = serve_entrypoint(base_image) if base_image else None
    return container_invocations(words, text, context, image_entrypoint=inherited)


def _instructions(text: str) -> list[_Instruction]:
    found: list[_Instruction] = []
    for match in _INSTRUCTION.finditer(text):
        line_start = text.rfind("\n", 0, match.start()) + 1
        if found and found[-1].end > line_start:
            continue  # a continuation line of the previous instruction
        if text[line_start : match.start()].strip():
            continue
        end = match.end()
        while True:
            newline = text.find("\n", end)
            if newline < 0:
                end = len(text)
                break
            if text[end:newline].rstrip().endswith("\\"):
                end = newline + 1
                continue
            end = newline
            break
        found.append(_Instruction(match.group(1).upper(), match.end(), end))
    return found


def _environment(
    stage: list[_Instruction], text: str, index: LineIndex
) -> tuple[EnvAssignment, ...]:
    """The final stage's ``ENV`` assignments, ``${ARG}`` references resolved from the
    stage's ``ARG`` defaults and earlier ``ENV`` values where those are literal."""
    known: dict[str, str | None] = {}
    found: list[EnvAssignment] = []
    for instruction in stage:
        if instruction.keyword not in ("ENV", "ARG"):
            continue
        for name, value, start, end in _assignments(instruction, text):
            if value is not None and "$" in value:
                value = _substitute(value, known)
            known[name] = value
            if instruction.keyword == "ENV":
                where = index.location(start, end)
                found.append(EnvAssignment(name=name, value=value, location=where))
    return tuple(found)


def _assignments(instruction: _Instruction, text: str) -> list[tuple[str, str | None, int, int]]:
    """(name, value, start, end) of each assignment of an ENV or ARG instruction."""
    body = instruction.body(text)
    base = instruction.start
    try:
        lexed = lex(body.replace("\\\n", "  "))
    except LexError:
        return []
    words = [w for command in lexed.commands for w in command.words]
    if instruction.keyword == "ENV" and words and "=" not in words[0].text:
        # legacy form: ENV NAME the rest of the line
        first = words[0]
        rest = body[first.end :].strip()
        return [(first.text, rest.strip("\"'"), base + first.start, base + first.end)]
    found: list[tuple[str, str | None, int, int]] = []
    for word in words:
        name, has_value, value = word.text.partition("=")
        found.append((name, value if has_value else None, base + word.start, base + word.end))
    return found


def _substitute(value: str, known: dict[str, str | None]) -> str | None:
    """``$NAME``/``${NAME}`` replaced by known values; None when one is not known."""
    unknown = False

    def replace(match: re.Match[str]) -> str:
        nonlocal unknown
        name = match.group(1) or match.group(2)
        found = known.get(name)
        if found is None:
            unknown = True
            return match.group(0)
        return found

    result = _REFERENCE.sub(replace, value)
    return None if unknown else result


_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)[^}]*\}|\$([A-Za-z_][A-Za-z0-9_]*)")


def _final_stage(instructions: list[_Instruction]) -> list[_Instruction]:
    starts = [n for n, i in enumerate(instructions) if i.keyword == "FROM"]
    return instructions[starts[-1] :] if starts else instructions


def _exec_words(instruction: _Instruction, text: str, index: LineIndex) -> list[ArgvWord] | None:
    """The words of an exec-form (JSON array) instruction; None for the shell form."""
    body = instruction.body(text).strip().replace("\\\n", "")
    where = f"{index.file or '<input>'}:{instruction.keyword}"
    try:
        value = loads_json(body, where)  # nesting past the named limit: one line, not a crash
    except json.JSONDecodeError:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        return None
    words: list[ArgvWord] = []
    for match in _JSON_STRING.finditer(text, instruction.start, instruction.end):
        start, end = match.span()
        words.append(ArgvWord(json.loads(match.group(0)), index.location(start, end), (start, end)))
    return words


def _shell(
    instruction: _Instruction, text: str, index: LineIndex, context: ShellContext
) -> list[Invocation]:
    base = instruction.start

    def locate(start: int, end: int) -> Location:
        return index.location(base + start, base + end)

    return read_script(instruction.body(text), locate, context)
