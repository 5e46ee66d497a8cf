"""Makefile and justfile recipes: the server a ``make serve`` / ``just serve`` starts.

Make (https://www.gnu.org/software/make/manual/html_node/Splitting-Recipe-Lines.html):
a recipe line starts with a tab; a backslash-newline continues it onto the next line,
whose leading tab make removes; a line ending in a backslash with no recipe line after
it ends the recipe there (the backslash is dropped, nothing is continued onto the
next rule). ``@``/``-``/``+`` before a line change how make runs it, not its words;
``$(VAR)``/``${VAR}`` are make variables (their written value when the Makefile sets
one literally, else a runtime value) and ``$$`` is the shell's ``$``.

just (https://just.systems/man/en/): recipes are the indented lines under
``name args:``; ``{{var}}`` interpolates a ``var := "value"`` assignment or a recipe
parameter (a runtime value). Shapes: Makefiles whose ``run:`` recipe is ``python -m
vllm.entrypoints.openai.api_server \\`` over tab-indented lines with ``$(MODEL_NAME)``
set by ``MODEL_NAME ?= "..."  # comment``
(https://github.com/JaleelRadhu/Faithful_Summarization Makefile.mk,
https://github.com/tomasruizt/llm_app Makefile).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from kvtool.audit.inputs.detect import is_justfile_name
from kvtool.audit.inputs.positions import LineIndex, OffsetMap
from kvtool.audit.inputs.shell import ShellContext, read_script
from kvtool.audit.inputs.source import ReadSource
from kvtool.audit.model import Invocation, Location
from kvtool.errors import KvtoolError

_MAKE_ASSIGNMENT = re.compile(
    r"^(?:export[ \t]+|override[ \t]+)?([A-Za-z_][A-Za-z0-9_.-]*)[ \t]*"
    r"(?:\?=|:=|::=|\+=|=)[ \t]*(.*)$"
)
_MAKE_REFERENCE = re.compile(r"\$\$|\$[({]([A-Za-z_][A-Za-z0-9_.-]*)[)}]")
_JUST_ASSIGNMENT = re.compile(
    r"^(?:export[ \t]+)?([A-Za-z_][A-Za-z0-9_-]*)[ \t]*:=[ \t]*(['\"])(.*)\2[ \t]*$"
)
_JUST_RECIPE = re.compile(r"^@?[A-Za-z_][A-Za-z0-9_-]*(?:[ \t][^:]*)?:(?!=)")
_JUST_INTERPOLATION = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_-]*)\s*\}\}")
_LINE_PREFIX = re.compile(r"[@+-]*")
KIND = "makefile"  # the registry's kind for both: recipes of a make-like runner


def read(text: str, source: ReadSource) -> list[Invocation]:
    name = (source.file or "").replace("\\", "/").rsplit("/", 1)[-1].lower()
    if is_justfile_name(name):
        return _read_just(text, source)
    return _read_make(text, source)


def _lines(text: str) -> list[tuple[int, int]]:
    found: list[tuple[int, int]] = []
    start = 0
    while start <= len(text):
        end = text.find("\n", start)
        end = len(text) if end < 0 else end
        found.append((start, end))
        start = end + 1
    return found


def _read_make(text: str, source: ReadSource) -> list[Invocation]:
    variables: dict[str, str] = {}
    recipes: list[list[tuple[int, int]]] = []  # each logical recipe line: its physical lines
    in_recipe = False
    continuing = False
    for start, end in _lines(text):
        line = text[start:end]
        if line.startswith("\t"):
            if not in_recipe:
                continue
            if continuing:
                recipes[-1].append((start + 1, end))
            else:
                recipes.append([(start + 1, end)])
            continuing = line.rstrip().endswith("\\")
            continue
        continuing = False
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        assignment = _MAKE_ASSIGNMENT.match(line)
        value = assignment.group(2).split("#", 1)[0].strip() if assignment else ""
        if assignment and "$" not in value:
            variables[assignment.group(1)] = value
            in_recipe = False
        else:
            in_recipe = ":" in line
    return _read_recipes(text, source, recipes, lambda m: _make_value(m, variables))


def _make_value(match: re.Match[str], variables: dict[str, str]) -> str:
    if match.group(0) == "$$":
        return "$"
    name = match.group(1)
    return variables.get(name, "${" + re.sub(r"\W", "_", name) + "}")


def _read_just(text: str, source: ReadSource) -> list[Invocation]:
    variables: dict[str, str] = {}
    recipes: list[list[tuple[int, int]]] = []
    in_recipe = False
    continuing = False
    for start, end in _lines(text):
        line = text[start:end]
        if line[:1] in (" ", "\t") and in_recipe and line.strip():
            indent = len(line) - len(line.lstrip())
            if continuing:
                recipes[-1].append((start + indent, end))
            else:
                recipes.append([(start + indent, end)])
            continuing = line.rstrip().endswith("\\")
            continue
        continuing = False
        if not line.strip():
            continue
        assignment = _JUST_ASSIGNMENT.match(line)
        if assignment:
            variables[assignment.group(1)] = assignment.group(3)
            in_recipe = False
        else:
            in_recipe = bool(_JUST_RECIPE.match(line))

    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        return variables.get(name, "${" + name.replace("-", "_") + "}")

    return _read_recipes(text, source, recipes, value, _JUST_INTERPOLATION)


def _read_recipes(
    text: str,
    source: ReadSource,
    recipes: list[list[tuple[int, int]]],
    value: Callable[[re.Match[str]], str],
    reference: re.Pattern[str] = _MAKE_REFERENCE,
) -> list[Invocation]:
    index = LineIndex(text, source.file)
    context = ShellContext(file=source.file, kind=KIND, base_dir=source.base_dir)
    found: list[Invocation] = []
    for physical in recipes:
        if not any("vllm" in text[s:e] or " run" in text[s:e] for s, e in physical):
            continue
        script, mapping = _expanded(text, physical, reference, value)

        def locate(begin: int, finish: int, mapped: OffsetMap = mapping) -> Location:
            return index.location(mapped.to_source(begin), mapped.to_source(finish))

        try:
            found.extend(read_script(script, locate, context))
        except KvtoolError:
            continue
    return found


def _expanded(
    text: str,
    physical: list[tuple[int, int]],
    reference: re.Pattern[str],
    value: Callable[[re.Match[str]], str],
) -> tuple[str, OffsetMap]:
    """The shell script of one logical recipe line, variables expanded, with a map from
    its offsets to the recipe's text (a substituted value points at its reference)."""
    parts: list[str] = []
    anchors: list[tuple[int, int]] = []
    length = 0

    def add(chunk: str, source: int) -> None:
        nonlocal length
        anchors.append((length, source))
        parts.append(chunk)
        length += len(chunk)

    for number, (start, end) in enumerate(physical):
        if number:
            add("\n", start)
        line_end = end
        if number == len(physical) - 1 and text[start:end].rstrip().endswith("\\"):
            line_end = start + len(text[start:end].rstrip()) - 1  # make drops it
        position = start
        if number == 0:
            prefix = _LINE_PREFIX.match(text, start, line_end)
            position = prefix.end() if prefix else start
        for match in reference.finditer(text, position, line_end):
            add(text[position : match.start()], position)
            add(value(match), match.start())
            position = match.end()
        add(text[position:line_end], position)
    return "".join(parts), OffsetMap(tuple(anchors))
