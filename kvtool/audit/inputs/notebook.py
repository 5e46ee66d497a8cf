"""Jupyter notebooks (.ipynb): the servers their code cells start, at the lines written.

A notebook is JSON: each code cell's ``source`` is a list of strings, one a line
(https://nbformat.readthedocs.io/en/latest/format_description.html#code-cells). Cells
start vLLM in three ways, often in a tutorial or a Colab/Kaggle run:

* a shell escape line, ``!python -m vllm.entrypoints.openai.api_server \\`` continued
  by the next strings, or ``!nohup vllm serve M &``;
* a shell cell, ``%%bash`` / ``%%sh`` / ``%%script bash`` on its first line;
* Python, ``subprocess.Popen(["vllm", "serve", MODEL, ...])``.

The code cells are read as one program, in order, because a notebook's kernel runs
them in one namespace (a ``MODEL = "..."`` in the first cell is the model a later
cell's list names): the Python lines are read by the Python launcher reader and the
shell lines by the shell reader, each over a copy of the cells in which the other's
lines are blanked (same length, so every offset stays), and every position is then
mapped to where its character is written in the notebook file. ``%env NAME=value``
lines set the environment of the shell lines. Outputs are never read (a log that
echoes a command line is a record, not a start).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable

import msgspec

from kvtool.audit.inputs import python_launcher
from kvtool.audit.inputs.positions import LineIndex, OffsetMap
from kvtool.audit.inputs.shell import ShellContext, read_script
from kvtool.audit.inputs.source import ReadSource
from kvtool.audit.model import EnvAssignment, Invocation, Location
from kvtool.errors import KvtoolError

KIND = "notebook"
# A cell magic that runs the cell as a shell script.
_SHELL_CELL = re.compile(r"^[ \t]*%%(?:bash|sh|script[ \t]+(?:ba)?sh)\b")
# IPython's line magic `%env NAME=value` / `%env NAME value`.
_ENV_MAGIC = re.compile(r"^[ \t]*%env[ \t]+([A-Za-z_]\w*)(?:=|[ \t]+)(\S.*?)[ \t]*$")


class _Cells(msgspec.Struct, frozen=True):
    """The code cells joined into one text, and where each of its characters is written."""

    text: str
    mapping: OffsetMap
    shell_lines: frozenset[int]  # indexes of the lines shell runs
    cell_of_line: tuple[int, ...]  # the notebook cell each line comes from


def read(text: str, source: ReadSource) -> list[Invocation]:
    try:
        notebook = json.loads(text)
    except (ValueError, RecursionError):
        raise KvtoolError(f"{source.file or '<input>'}: invalid notebook JSON") from None
    cells = _code_cells(notebook, text)
    if cells is None or "vllm" not in cells.text:
        return []
    index = LineIndex(text, source.file)
    derived = LineIndex(cells.text, source.file)
    found: list[Invocation] = []
    lines = cells.text.splitlines(keepends=True)
    shell_text = _keep(lines, lambda i, line: i in cells.shell_lines, bang=True)
    python_text = _keep(lines, lambda i, line: i not in cells.shell_lines and not _magic(line))

    def locate(start: int, end: int) -> Location:
        return index.location(cells.mapping.to_source(start), cells.mapping.to_source(end))

    if "vllm" in shell_text:
        env = _env_magics(lines, derived, locate)
        context = ShellContext(file=source.file, kind=KIND, base_dir=source.base_dir, env=env)
        found.extend(read_script(shell_text, locate, context))
    if "vllm" in python_text:
        inner = ReadSource(source.file, source.base_dir, source.configmaps)
        for invocation in python_launcher.read(python_text, inner):
            found.append(_relocated(invocation, derived, locate))
    return found


def _code_cells(notebook: object, text: str) -> _Cells | None:
    """The code cells' lines, each found in ``text`` where the notebook writes it."""
    cells = notebook.get("cells") if isinstance(notebook, dict) else None
    if not isinstance(cells, list):
        return None
    parts: list[str] = []
    anchors: list[tuple[int, int]] = []
    shell: set[int] = set()
    cell_of_line: list[int] = []
    length = 0
    cursor = 0
    for number, cell in enumerate(cells):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        source = cell.get("source")
        strings = [source] if isinstance(source, str) else source
        if not isinstance(strings, list) or not all(isinstance(s, str) for s in strings):
            continue
        lines = "".join(strings).splitlines(keepends=True)
        if lines and not lines[-1].endswith("\n"):
            lines[-1] += "\n"  # the cell ends its last line
        first = len(cell_of_line)
        shell.update(first + i for i in _shell_line_indexes(lines))
        for line in lines:
            cursor = _anchor(line, text, cursor, length, anchors)
            parts.append(line)
            cell_of_line.append(number)
            length += len(line)
    if not parts:
        return None
    return _Cells("".join(parts), OffsetMap(tuple(anchors)), frozenset(shell), tuple(cell_of_line))


def _anchor(line: str, text: str, cursor: int, length: int, anchors: list[tuple[int, int]]) -> int:
    """Add the anchors of one cell line, found as a JSON string at or after ``cursor``;
    returns where the search for the next line starts."""
    content = line.rstrip("\n")
    for written in (json.dumps(content, ensure_ascii=False), json.dumps(content)):
        # The written string runs on to the line's "\n" escape when the line has one.
        opening = text.find(written[:-1], cursor)
        if opening >= 0:
            end = opening + len(written) - 1
            mapping = OffsetMap.align(content, text, opening + 1, end)
            anchors.extend((length + value, source) for value, source in mapping.anchors)
            return end
    anchors.append((length, anchors[-1][1] if anchors else 0))
    return cursor


def _shell_line_indexes(lines: list[str]) -> list[int]:
    """The lines of one cell that shell runs: all but the magic of a shell cell; else
    each ``!`` line and the lines its trailing backslashes continue it onto."""
    if lines and _SHELL_CELL.match(lines[0]):
        return list(range(1, len(lines)))
    found: list[int] = []
    continued = False
    for number, line in enumerate(lines):
        if continued or line.lstrip().startswith("!"):
            found.append(number)
            continued = line.rstrip("\r\n").endswith("\\")
    return found


def _magic(line: str) -> bool:
    return line.lstrip().startswith("%")


def _keep(lines: list[str], kept: Callable[[int, str], bool], *, bang: bool = False) -> str:
    """The cells' text with every line ``kept`` refuses blanked (newlines stay); with
    ``bang``, a shell escape's ``!`` is blanked too."""
    out: list[str] = []
    for number, line in enumerate(lines):
        if not kept(number, line):
            out.append(re.sub(r"[^\n]", " ", line))
        elif bang and line.lstrip().startswith("!"):
            out.append(line.replace("!", " ", 1))
        else:
            out.append(line)
    return "".join(out)


def _env_magics(
    lines: list[str], derived: LineIndex, locate: Callable[[int, int], Location]
) -> tuple[EnvAssignment, ...]:
    found: list[EnvAssignment] = []
    for number, line in enumerate(lines):
        match = _ENV_MAGIC.match(line.rstrip("\n"))
        if match is None:
            continue
        start = derived.starts[number] + match.start(1)
        value = match.group(2).strip("\"'")
        found.append(EnvAssignment(name=match.group(1), value=value, location=locate(start, start)))
    return tuple(found)


def _relocated(
    invocation: Invocation, derived: LineIndex, locate: Callable[[int, int], Location]
) -> Invocation:
    """``invocation`` read from the joined cells, its positions moved into the notebook."""

    def moved(location: Location | None) -> Location | None:
        if location is None or location.line is None or location.column is None:
            return location
        start = derived.offset(location.line, location.column)
        end = start
        if location.end_column is not None:
            end = derived.offset(location.end_line or location.line, location.end_column)
        return msgspec.structs.replace(locate(start, end), file=location.file)

    def moved_line(line: int | None) -> int | None:
        if line is None or not 1 <= line <= len(derived.starts):
            return line
        return locate(derived.starts[line - 1], derived.starts[line - 1]).line

    tokens = tuple(
        msgspec.structs.replace(token, location=moved(token.location))
        for token in invocation.tokens
    )
    env = tuple(msgspec.structs.replace(e, location=moved(e.location)) for e in invocation.env)
    suppressions = tuple(
        msgspec.structs.replace(
            s, location=moved(s.location), target_line=moved_line(s.target_line)
        )
        for s in invocation.suppressions
    )
    label = _relabelled(invocation.label, derived, locate)
    return msgspec.structs.replace(
        invocation, kind=KIND, tokens=tokens, env=env, suppressions=suppressions, label=label
    )


_LINE_LABEL = re.compile(r":(\d+)$")


def _relabelled(label: str, derived: LineIndex, locate: Callable[[int, int], Location]) -> str:
    """A ``file:LINE`` label with the line the notebook writes it at."""
    match = _LINE_LABEL.search(label)
    if match is None:
        return label
    line = int(match.group(1))
    if not 1 <= line <= len(derived.starts):
        return label
    written = locate(derived.starts[line - 1], derived.starts[line - 1]).line
    return label[: match.start(1)] + str(written)
