"""Apply ``Fix`` token edits to argv and shell scripts; everything else stays byte-identical.

A fix names the tokens to remove (by the location they were read from) and the
words to put in place of the first of them. For a script, each removed token's
exact source span is cut; a token that sat alone on a continued line takes its
whole line with it, so ``\\`` continuations stay intact. YAML inputs (manifests,
compose files, ``--config`` files, KAITO ConfigMaps) are refused: rewriting YAML
safely needs a round-trip editor, so their fixes are display-only.
"""

from __future__ import annotations

import difflib
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from kvtool.audit.inputs.positions import LineIndex
from kvtool.audit.inputs.shell_lexer import LexError, lex
from kvtool.audit.model import Fix, InputKind, SourceToken
from kvtool.errors import KvtoolError

REWRITABLE: frozenset[InputKind] = frozenset({"argv", "shell"})
_CONTINUATION_TAIL = re.compile(r"[ \t]*\\?[ \t]*")


@dataclass(frozen=True)
class FixOutcome:
    """The rewritten input and what happened to each fix."""

    text: str  # new file text, or the new argv joined as one shell line
    diff: str  # unified diff, empty when nothing changed
    applied_fixes: tuple[int, ...]  # positions in the given fixes of those applied
    skipped: tuple[str, ...]  # why a fix was left out (conditional token, overlap, ...)
    argv: tuple[str, ...] | None = None  # the new argv, for argv inputs

    @property
    def applied(self) -> int:
        return len(self.applied_fixes)


@dataclass(frozen=True)
class _Edit:
    start: int
    end: int
    replacement: str


def check_rewritable(kind: InputKind, file: str | None) -> None:
    """Raise ``KvtoolError`` for inputs whose fixes can only be displayed."""
    if kind not in REWRITABLE:
        raise KvtoolError(
            f"{file or '<input>'}: --fix rewrites only shell scripts and argv; "
            f"fixes for {kind} input are shown, not applied"
        )


def fix_argv(argv: Sequence[str], fixes: Sequence[Fix]) -> FixOutcome:
    """Apply fixes whose tokens carry argv indexes; the diff compares the joined commands."""
    words: list[str | None] = list(argv)
    inserted: dict[int, tuple[str, ...]] = {}
    applied: list[int] = []
    skipped: list[str] = []
    for number, fix in enumerate(fixes):
        indexes = [t.index for t in fix.remove_tokens]
        if not indexes or any(i is None or not 0 <= i < len(argv) for i in indexes):
            skipped.append(f"{fix.description}: its tokens carry no argv position")
            continue
        positions = sorted(i for i in indexes if i is not None)
        if any(words[i] is None or i in inserted for i in positions):
            skipped.append(f"{fix.description}: overlaps another fix")
            continue
        if any(argv[t.index] != t.text for t in fix.remove_tokens if t.index is not None):
            skipped.append(f"{fix.description}: the argv no longer holds these words")
            continue
        for i in positions:
            words[i] = None
        inserted[positions[0]] = fix.replacement
        applied.append(number)
    result: list[str] = []
    for position, word in enumerate(words):
        result.extend(inserted.get(position, ()))
        if word is not None:
            result.append(word)
    before, after = shlex.join(argv) + "\n", shlex.join(result) + "\n"
    return FixOutcome(
        text=after,
        diff=_diff(before, after, "argv"),
        applied_fixes=tuple(applied),
        skipped=tuple(skipped),
        argv=tuple(result),
    )


def fix_text(text: str, fixes: Sequence[Fix], *, file: str | None, kind: InputKind) -> FixOutcome:
    """Apply fixes to a shell script's text; other kinds raise ``KvtoolError``."""
    check_rewritable(kind, file)
    index = LineIndex(text, file)
    edits: list[_Edit] = []
    skipped: list[str] = []
    applied: list[int] = []
    for number, fix in enumerate(fixes):
        planned, reason = _plan(text, index, fix)
        if reason is not None:
            skipped.append(f"{fix.description}: {reason}")
            continue
        if any(_overlaps(edit, other) for edit in planned for other in edits):
            skipped.append(f"{fix.description}: overlaps another fix")
            continue
        edits.extend(planned)
        applied.append(number)
    new_text = _apply(text, edits)
    return FixOutcome(
        text=new_text,
        diff=_diff(text, new_text, file or "<input>"),
        applied_fixes=tuple(applied),
        skipped=tuple(skipped),
    )


def _plan(text: str, index: LineIndex, fix: Fix) -> tuple[list[_Edit], str | None]:
    spans: list[tuple[int, int]] = []
    for token in fix.remove_tokens:
        if token.conditional:
            return [], f"{token.text!r} comes from a ${{VAR:+...}} expansion"
        span = _span(index, token)
        if span is None:
            return [], f"{token.text!r} has no exact position"
        if not _span_holds(text[span[0] : span[1]], token):
            return [], f"{index.file or '<input>'} no longer holds {token.text!r} where it was read"
        spans.append(span)
    if not spans:
        return [], "it removes no tokens"
    spans.sort()
    replacement = " ".join(shlex.quote(word) for word in fix.replacement)
    edits = [_Edit(spans[0][0], spans[0][1], replacement)] if replacement else []
    edits += [_removal(text, start, end) for start, end in (spans[1:] if replacement else spans)]
    return edits, None


def _span(index: LineIndex, token: SourceToken) -> tuple[int, int] | None:
    where = token.location
    if where is None or where.line is None or where.column is None or where.end_column is None:
        return None
    if where.file != index.file:
        return None
    start = index.offset(where.line, where.column)
    end = index.offset(where.end_line or where.line, where.end_column)
    return start, end


def _span_holds(written: str, token: SourceToken) -> bool:
    """The span, read as shell words again, is still exactly the token."""
    try:
        lexed = lex(written)
    except LexError:
        return False
    words = [w.text for command in lexed.commands for w in command.words]
    return words == [token.text]


def _removal(text: str, start: int, end: int) -> _Edit:
    """Cut a token and the blanks before it (blank lines left behind go in ``_apply``)."""
    line_start = text.rfind("\n", 0, start) + 1
    cut = start
    while cut > line_start and text[cut - 1] in " \t":
        cut -= 1
    return _Edit(cut, end, "")


def _apply(text: str, edits: list[_Edit]) -> str:
    """Apply edits, then drop lines they emptied, keeping ``\\`` continuations consistent."""
    ordered = sorted(edits, key=lambda e: e.start)
    pieces: list[str] = []
    touched: list[int] = []  # offsets in the new text where an edit landed
    cursor = 0
    length = 0
    for edit in ordered:
        pieces.append(text[cursor : edit.start])
        length += edit.start - cursor
        touched.append(length)
        pieces.append(edit.replacement)
        length += len(edit.replacement)
        cursor = edit.end
    pieces.append(text[cursor:])
    new_text = "".join(pieces)
    lines = new_text.split("\n")
    new_index = LineIndex(new_text)
    emptied = {
        number
        for number in {new_index.line_col(offset)[0] - 1 for offset in touched}
        if _CONTINUATION_TAIL.fullmatch(lines[number])
    }
    kept: list[str] = []
    for number, line in enumerate(lines):
        if number not in emptied:
            kept.append(line)
            continue
        ends_command = not line.rstrip().endswith("\\")
        if ends_command and kept and kept[-1].rstrip().endswith("\\"):
            # The command now ends on the previous line: its continuation must go.
            kept[-1] = kept[-1].rstrip()[:-1].rstrip()
    return "\n".join(kept)


def _overlaps(first: _Edit, second: _Edit) -> bool:
    return first.start < second.end and second.start < first.end


def _diff(before: str, after: str, name: str) -> str:
    if before == after:
        return ""
    return "".join(
        difflib.unified_diff(
            before.splitlines(keepends=True),
            after.splitlines(keepends=True),
            fromfile=name if name.startswith("/") else f"a/{name}",
            tofile=name if name.startswith("/") else f"b/{name}",
        )
    )
