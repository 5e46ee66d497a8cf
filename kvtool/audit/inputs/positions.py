"""Turn character offsets into ``Location``s: every token remembers where it was written."""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from kvtool.audit.model import Location


@dataclass(frozen=True)
class LineIndex:
    """Offsets of line starts in one text, so an offset maps to (line, column) in O(log n)."""

    text: str
    file: str | None = None
    starts: tuple[int, ...] = field(init=False)

    def __post_init__(self) -> None:
        starts = [0]
        newline = self.text.find("\n")
        while newline >= 0:
            starts.append(newline + 1)
            newline = self.text.find("\n", newline + 1)
        object.__setattr__(self, "starts", tuple(starts))

    def line_col(self, offset: int) -> tuple[int, int]:
        """1-based line and column of ``offset`` (clamped into the text)."""
        offset = max(0, min(offset, len(self.text)))
        line = bisect.bisect_right(self.starts, offset) - 1
        return line + 1, offset - self.starts[line] + 1

    def location(self, start: int, end: int | None = None) -> Location:
        """Location of the span ``[start, end)``; ``end_line`` only when it ends on a later line."""
        line, column = self.line_col(start)
        if end is None or end <= start:
            return Location(file=self.file, line=line, column=column)
        end_line, end_column = self.line_col(end)
        return Location(
            file=self.file,
            line=line,
            column=column,
            end_column=end_column,
            end_line=end_line if end_line != line else None,
        )

    def offset(self, line: int, column: int) -> int:
        """Inverse of ``line_col`` for 1-based positions inside the text."""
        return self.starts[line - 1] + column - 1


@dataclass(frozen=True)
class OffsetMap:
    """Maps offsets in a derived string (a YAML scalar's value) back to the source text.

    Anchors are (value offset, source offset) pairs sorted by value offset; an offset
    maps through the nearest anchor at or before it. Exact wherever the value was
    written verbatim (plain, single-line and literal block scalars); elsewhere it
    points at the start of the line the value came from.
    """

    anchors: tuple[tuple[int, int], ...]
    _keys: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_keys", tuple(a[0] for a in self.anchors))

    def to_source(self, value_offset: int) -> int:
        position = bisect.bisect_right(self._keys, value_offset) - 1
        if position < 0:
            return self.anchors[0][1] if self.anchors else 0
        value_anchor, source_anchor = self.anchors[position]
        return source_anchor + (value_offset - value_anchor)

    @classmethod
    def identity(cls, base: int = 0) -> OffsetMap:
        return cls(((0, base),))

    @classmethod
    def align(cls, value: str, source: str, source_start: int, source_end: int) -> OffsetMap:
        """Align ``value`` with how it was written in ``source[source_start:source_end]``.

        Each non-blank character of the value is looked up, in order, a short way
        ahead in the source; this follows YAML folding, indentation, quotes and
        escapes. Blanks get no anchor: no token starts at one.
        """
        anchors: list[tuple[int, int]] = [(0, source_start)]
        cursor = source_start
        for value_offset, char in enumerate(value):
            if char in " \t\n":
                continue
            found = source.find(char, cursor, min(source_end, cursor + _ALIGN_WINDOW))
            if found < 0:
                continue
            if found - value_offset != anchors[-1][1] - anchors[-1][0]:
                anchors.append((value_offset, found))
            cursor = found + 1
        return cls(tuple(anchors))


# How far ahead a value character is looked for: past a line break, its indentation
# and an escape, never into the next scalar.
_ALIGN_WINDOW = 200
