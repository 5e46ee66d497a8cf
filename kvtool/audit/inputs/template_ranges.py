"""Chart templates read without Helm: a ``range`` over a list the chart's defaults give.

Charts write a server's arguments as a loop over a values list
(``{{- range .Values.extraArgs }}`` / ``- {{ . | quote }}`` / ``{{- end }}``, or
``{{- range $key, $value := .Values.vllmArgs }}`` / ``- --{{ $key }}={{ $value }}``).
When no renderer is here, each such block whose list or map the chart's ``values.yaml``
gives is written out once per item, ``.`` (and the block's variables) standing for the
item as a quoted literal, so the text reader sees the arguments the chart renders by
default. The block's own lines, and each copy of its body, remember the template line
they came from (:func:`expand` returns the map), so a finding still points into the
template. Go's text/template semantics followed: a map is ranged over in key order
(https://pkg.go.dev/text/template#hdr-Actions). A block that is not on lines of its
own, that nests another ``range``, or whose list the defaults do not give, is left as
written (its values stay runtime values).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import msgspec

from kvtool.audit.model import Invocation, Location

_ACTION = re.compile(r"\{\{-?(.*?)-?\}\}", re.DOTALL)
_RANGE = re.compile(
    r"^range\s+(?:(\$\w+)\s*(?:,\s*(\$\w+))?\s*:=\s*)?(\$?\.Values(?:\.[A-Za-z_][\w-]*)+)$"
)
_OPENS = frozenset({"if", "with", "range", "define", "block"})
# `.` alone, or `.field` of a map item (never `.Values`, `.Release`, `.Chart`: the root's).
_DOT = re.compile(r"(?<![\w.$\"])\.(?![\w.])")
_DOT_FIELD = re.compile(r"(?<![\w.$\"])\.([a-z_]\w*)\b")
_ONLY_ACTION = re.compile(r"^[ \t]*\{\{-?.*?-?\}\}[ \t]*$")


def expand(text: str, values: Mapping[str, Any]) -> tuple[str, tuple[int, ...]]:
    """``text`` with every ``range`` over a default list written out, and for each line of
    the result the 1-based template line it came from."""
    lines = text.split("\n")
    origin = list(range(1, len(lines) + 1))
    if "range" not in text:
        return text, tuple(origin)
    out: list[str] = []
    out_origin: list[int] = []
    index = 0
    while index < len(lines):
        block = _block_at(lines, index, values)
        if block is None:
            out.append(lines[index])
            out_origin.append(origin[index])
            index += 1
            continue
        end, items, names = block
        out.append("")  # the range line prints nothing
        out_origin.append(origin[index])
        body = list(range(index + 1, end))
        for key, item in items:
            for at in body:
                out.append(_bound(lines[at], key, item, names))
                out_origin.append(origin[at])
        out.append("")  # nor does its end
        out_origin.append(origin[end])
        index = end + 1
    return "\n".join(out), tuple(out_origin)


_Items = list[tuple[Any, Any]]


def _block_at(
    lines: list[str], index: int, values: Mapping[str, Any]
) -> tuple[int, _Items, tuple[str | None, str | None]] | None:
    """(the end line, the items, the block's variable names) of a range at ``lines[index]``."""
    line = lines[index]
    if not _ONLY_ACTION.match(line):
        return None
    header = _action_body(line)
    match = _RANGE.match(header)
    if match is None:
        return None
    items = _items(_lookup(values, match.group(3)))
    if items is None:
        return None
    first, second = match.group(1), match.group(2)
    names = (first, second) if second else (None, first)  # ($key, $value) or ($value)
    depth = 0
    for at in range(index + 1, len(lines)):
        for action in _ACTION.finditer(lines[at]):
            keyword = action.group(1).strip().strip("-").strip().split(" ", 1)[0]
            if keyword == "range":
                return None  # nested loops stay as written
            if keyword in _OPENS:
                depth += 1
            elif keyword == "end":
                if depth == 0:
                    return (at, items, names) if _ONLY_ACTION.match(lines[at]) else None
                depth -= 1
    return None


def _action_body(line: str) -> str:
    match = _ACTION.search(line)
    return match.group(1).strip().strip("-").strip() if match else ""


def _lookup(values: Mapping[str, Any], path: str) -> Any:
    node: Any = values
    for key in path.lstrip("$").removeprefix(".Values.").split("."):
        if not isinstance(node, Mapping) or key not in node:
            return None
        node = node[key]
    return node


def _items(node: Any) -> _Items | None:
    if isinstance(node, list):
        return list(enumerate(node))
    if isinstance(node, Mapping):
        return sorted(node.items(), key=lambda pair: str(pair[0]))
    return None


def _bound(line: str, key: Any, item: Any, names: tuple[str | None, str | None]) -> str:
    """One body line with the item in place of ``.``, ``.field`` and the block's variables,
    inside its actions only."""
    key_name, value_name = names

    def substitute(action: re.Match[str]) -> str:
        body = action.group(0)
        if value_name is not None:
            body = re.sub(re.escape(value_name) + r"\b", _literal(item), body)
        if key_name is not None:
            body = re.sub(re.escape(key_name) + r"\b", _literal(key), body)
        if isinstance(item, Mapping):
            body = _DOT_FIELD.sub(
                lambda m: _literal(item[m.group(1)]) if m.group(1) in item else m.group(0), body
            )
        return _DOT.sub(_literal(item), body)

    return _ACTION.sub(substitute, line)


def _literal(value: Any) -> str:
    """A Go string literal printing as Helm prints ``value`` (``true``, ``8``, ``m``)."""
    written = ("true" if value else "false") if isinstance(value, bool) else str(value)
    if isinstance(value, (Mapping, list)) or value is None or '"' in written:
        return "$UNKNOWN"  # not printable as one literal: the action stays a runtime value
    return '"' + written + '"'


def with_template_lines(invocation: Invocation, origin: tuple[int, ...]) -> Invocation:
    """``invocation`` read from the expanded text, its lines those of the template."""

    def line(number: int | None) -> int | None:
        return origin[number - 1] if number is not None and 0 < number <= len(origin) else number

    def moved(location: Location | None) -> Location | None:
        if location is None or location.line is None:
            return location
        end_line = line(location.end_line)
        return msgspec.structs.replace(
            location,
            line=line(location.line),
            end_line=None if end_line == line(location.line) else end_line,
        )

    return msgspec.structs.replace(
        invocation,
        tokens=tuple(
            msgspec.structs.replace(t, location=moved(t.location)) for t in invocation.tokens
        ),
        env=tuple(msgspec.structs.replace(e, location=moved(e.location)) for e in invocation.env),
        suppressions=tuple(
            msgspec.structs.replace(s, location=moved(s.location), target_line=line(s.target_line))
            for s in invocation.suppressions
        ),
    )
