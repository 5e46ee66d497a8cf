"""systemd service units: ``ExecStart=`` with the unit's ``Environment=`` lines.

Shape: a ``[Service]`` section whose ``ExecStart=/usr/bin/env vllm serve MODEL \\``
continues over backslashed lines, next to ``Environment=`` and ``EnvironmentFile=``
(the ``/etc/systemd/system/vllm.service`` of https://github.com/kelvincushman/ContentSwarm's
AI-server setup guide). systemd splits ``ExecStart=`` with
shell-like quoting and substitutes ``$VAR``/``${VAR}`` from the unit's environment
(https://www.freedesktop.org/software/systemd/man/latest/systemd.service.html#Command%20lines);
the prefixes ``-@:+!`` change how it runs, not its words. ``EnvironmentFile=`` is read
when the unit runs, so what it sets is noted, not guessed.
"""

from __future__ import annotations

import re

from kvtool.audit.inputs.positions import LineIndex
from kvtool.audit.inputs.shell import ShellContext, read_script
from kvtool.audit.inputs.shell_lexer import LexError, lex
from kvtool.audit.inputs.source import ReadSource
from kvtool.audit.model import EnvAssignment, Invocation, Location

_SECTION = re.compile(r"^\s*\[([^\]]+)\]\s*$")
_SETTING = re.compile(r"^[ \t]*([A-Za-z]+)[ \t]*=[ \t]*")
_EXEC_PREFIX = re.compile(r"[-@:+!]*")
ENV_FILE_NOTE = "EnvironmentFile={path}: read when the unit starts; its variables are not known"


def read(text: str, source: ReadSource) -> list[Invocation]:
    index = LineIndex(text, source.file)
    env: list[EnvAssignment] = []
    notes: list[str] = []
    starts: list[tuple[int, int]] = []
    section = ""
    for start, end in _logical_lines(text):
        line = text[start:end]
        header = _SECTION.match(line)
        if header:
            section = header.group(1)
            continue
        setting = _SETTING.match(line)
        if section != "Service" or setting is None:
            continue
        key, value_start = setting.group(1), start + setting.end()
        if key == "Environment":
            env.extend(_assignments(text, value_start, end, index))
        elif key == "EnvironmentFile":
            notes.append(ENV_FILE_NOTE.format(path=text[value_start:end].strip()))
        elif key == "ExecStart":
            prefix = _EXEC_PREFIX.match(text, value_start)
            starts.append((prefix.end() if prefix else value_start, end))
    context = ShellContext(
        file=source.file, kind="systemd", base_dir=source.base_dir, env=tuple(env)
    )
    found: list[Invocation] = []
    for start, end in starts:

        def locate(begin: int, finish: int, base: int = start) -> Location:
            return index.location(base + begin, base + finish)

        for invocation in read_script(text[start:end], locate, context):
            invocation.notes = (*invocation.notes, *notes)
            found.append(invocation)
    return found


def _logical_lines(text: str) -> list[tuple[int, int]]:
    """(start, end) of each line, a line ending in a backslash joined with the next."""
    lines: list[tuple[int, int]] = []
    start = 0
    while start < len(text):
        end = text.find("\n", start)
        end = len(text) if end < 0 else end
        while text[start:end].rstrip().endswith("\\") and end < len(text):
            following = text.find("\n", end + 1)
            end = len(text) if following < 0 else following
        lines.append((start, end))
        start = end + 1
    return lines


def _assignments(text: str, start: int, end: int, index: LineIndex) -> list[EnvAssignment]:
    """``Environment="A=1" B=2``: each word one assignment."""
    try:
        lexed = lex(text[start:end])
    except LexError:
        return []
    found: list[EnvAssignment] = []
    for command in lexed.commands:
        for word in command.words:
            name, has_value, value = word.text.partition("=")
            if has_value:
                where = index.location(start + word.start, start + word.end)
                found.append(
                    EnvAssignment(name=name, value=None if word.dynamic else value, location=where)
                )
    return found
