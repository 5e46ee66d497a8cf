"""The edit engine of ``--fix``: apply ``Fix`` token edits to argv, shell scripts, Kubernetes
manifests and compose files; everything else stays byte-identical.

A fix names the tokens to remove (by the location they were read from) and the
words to put in place of the first of them. For a script, each removed token's
exact source span is cut; a token that sat alone on a continued line takes its
whole line with it, so ``\\`` continuations stay intact. In YAML, a token that is a
whole block-sequence item (``- --flag``) takes its line with it, one in a flow sequence
(``["--flag", ...]``) its comma, and one inside a string (a ``sh -c`` script, a compose
``command:``) is cut as in a script. Every YAML rewrite is then read back with the same
reader: unless each command in the file comes out exactly as the fixes intend, the
file is left alone and the fixes are reported as skipped. ``--config`` files and KAITO
ConfigMaps (YAML inside YAML) keep display-only fixes.
"""

from __future__ import annotations

import difflib
import json
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from kvtool.audit.inputs.positions import LineIndex
from kvtool.audit.inputs.shell_lexer import LexError, lex
from kvtool.audit.model import (
    REWRITABLE,
    YAML_REWRITABLE,
    Fix,
    InputKind,
    Invocation,
    SourceToken,
)
from kvtool.errors import KvtoolError
from kvtool.fsio import BOM

_CONTINUATION_TAIL = re.compile(r"[ \t]*\\?[ \t]*")
_SEQUENCE_ITEM_HEAD = re.compile(r"[ \t]*-[ \t]+")
_LINE_TAIL = re.compile(r"[ \t]*(#.*)?")
_FLOW_SEPARATOR = re.compile(r"[ \t]*,[ \t]*")
_PLAIN_YAML_WORD = re.compile(r"[A-Za-z0-9_./=+-][A-Za-z0-9_./=+:-]*")


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
            f"{file or '<input>'}: --fix rewrites only argv, shell scripts, Kubernetes "
            f"manifests and compose files; fixes for {kind} input are shown, not applied"
        )


def fix_argv(argv: Sequence[str], fixes: Sequence[Fix]) -> FixOutcome:
    """Apply fixes whose tokens carry argv indexes; the diff compares the joined commands."""
    words: list[str | None] = list(argv)
    inserted: dict[int, tuple[str, ...]] = {}
    appended: dict[int, list[str]] = {}  # words added after a word that stays
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
        if fix.insert_after:
            appended.setdefault(positions[-1], []).extend(fix.replacement)
            applied.append(number)
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
        result.extend(appended.get(position, ()))
    before, after = shlex.join(argv) + "\n", shlex.join(result) + "\n"
    return FixOutcome(
        text=after,
        diff=_diff(before, after, "argv"),
        applied_fixes=tuple(applied),
        skipped=tuple(skipped),
        argv=tuple(result),
    )


def fix_text(
    text: str,
    fixes: Sequence[Fix],
    *,
    file: str | None,
    kind: InputKind,
    invocations: Sequence[Invocation] = (),
) -> FixOutcome:
    """Apply fixes to a script's or manifest's text; other kinds raise ``KvtoolError``.

    For YAML kinds, ``invocations`` are the commands read from ``text``: the rewrite must
    read back as exactly them with the applied fixes made, or nothing is changed.
    """
    check_rewritable(kind, file)
    yaml_input = kind in YAML_REWRITABLE
    index = LineIndex(text, file)
    edits: list[_Edit] = []
    skipped: list[str] = []
    applied: list[int] = []
    for number, fix in enumerate(fixes):
        planned, reason = _plan(text, index, fix, yaml_input=yaml_input)
        if reason is not None:
            skipped.append(f"{fix.description}: {reason}")
            continue
        merged = _merge(text, edits, planned)
        if merged is None:
            skipped.append(f"{fix.description}: overlaps another fix")
            continue
        edits = merged
        applied.append(number)
    new_text = _apply(text, edits)
    if yaml_input and applied:
        problem = _read_back_problem(
            new_text, file, kind, invocations, [fixes[number] for number in applied]
        )
        if problem is not None:
            skipped += [f"{fixes[number].description}: {problem}" for number in applied]
            return FixOutcome(text=text, diff="", applied_fixes=(), skipped=tuple(skipped))
    return FixOutcome(
        text=new_text,
        diff=_diff(text, new_text, file or "<input>"),
        applied_fixes=tuple(applied),
        skipped=tuple(skipped),
    )


def _plan(
    text: str, index: LineIndex, fix: Fix, *, yaml_input: bool = False
) -> tuple[list[_Edit], str | None]:
    spans: list[tuple[int, int]] = []
    for token in fix.remove_tokens:
        if token.conditional:
            return [], f"{token.text!r} comes from a ${{VAR:+...}} expansion"
        span = _span(index, token)
        if span is None:
            return [], f"{token.text!r} has no exact position"
        written = text[span[0] : span[1]]
        if not (_span_holds(written, token) or (yaml_input and _yaml_scalar_is(written, token))):
            return [], f"{index.file or '<input>'} no longer holds {token.text!r} where it was read"
        spans.append(span)
    if not spans:
        return [], "it removes no tokens"
    spans.sort()
    if fix.insert_after:
        return _insertion(text, spans[-1][1], fix.replacement, yaml_input=yaml_input)
    return _span_edits(text, spans, fix.replacement, yaml_input=yaml_input)


def _insertion(
    text: str, at: int, words: tuple[str, ...], *, yaml_input: bool
) -> tuple[list[_Edit], str | None]:
    """Words added right after the word that ends at ``at``, as that word is written."""
    if yaml_input and _sequence_item_line(text, text.rfind("\n", 0, at) + 1, at) is not None:
        return [], "adding items to a YAML sequence is left to you"
    if yaml_input and _in_flow_sequence(text, at):
        return [_Edit(at, at, "".join(", " + _yaml_scalar(word) for word in words))], None
    return [_Edit(at, at, "".join(" " + shlex.quote(word) for word in words))], None


def _span_edits(
    text: str, spans: list[tuple[int, int]], replacement: tuple[str, ...], *, yaml_input: bool
) -> tuple[list[_Edit], str | None]:
    """One edit per removed span; the first span takes the replacement words.

    In YAML a span that is a whole block-sequence item, or an item of a flow sequence,
    is edited as YAML; any other span (a script's word, a word in a YAML string) is cut
    or replaced as a shell word.
    """
    edits: list[_Edit] = []
    for number, (start, end) in enumerate(spans):
        words = replacement if number == 0 else ()
        item = _sequence_item_line(text, start, end) if yaml_input else None
        if item is not None:
            if len(words) > 1:
                return [], "a sequence item can take only one replacement word"
            edits.append(_Edit(start, end, _yaml_scalar(words[0])) if words else _Edit(*item, ""))
        elif yaml_input and _in_flow_sequence(text, start):
            edits.append(
                _Edit(start, end, ", ".join(_yaml_scalar(word) for word in words))
                if words
                else _flow_removal(text, start, end)
            )
        elif words:
            edits.append(_Edit(start, end, " ".join(shlex.quote(word) for word in words)))
        else:
            edits.append(_removal(text, start, end))
    return edits, None


def _sequence_item_line(text: str, start: int, end: int) -> tuple[int, int] | None:
    """The whole line (newline included) when the span is a block-sequence item alone."""
    line_start = text.rfind("\n", 0, start) + 1
    newline = text.find("\n", end)
    line_end = len(text) if newline < 0 else newline
    head, tail = text[line_start:start], text[end:line_end]
    if _SEQUENCE_ITEM_HEAD.fullmatch(head) and _LINE_TAIL.fullmatch(tail):
        return line_start, line_end + (0 if newline < 0 else 1)
    return None


def _in_flow_sequence(text: str, start: int) -> bool:
    """Whether the nearest unclosed bracket before ``start`` opens a flow sequence."""
    depth = 0
    for offset in range(start - 1, -1, -1):
        char = text[offset]
        if char in "]}":
            depth += 1
        elif char in "[{":
            if depth == 0:
                return char == "["
            depth -= 1
    return False


def _flow_removal(text: str, start: int, end: int) -> _Edit:
    """Cut a flow-sequence item with the separator after it (or before it, when last)."""
    after = _FLOW_SEPARATOR.match(text, end)
    if after is not None:
        return _Edit(start, after.end(), "")
    cut = start
    while cut > 0 and text[cut - 1] in " \t":
        cut -= 1
    if cut > 0 and text[cut - 1] == ",":
        cut -= 1
    return _Edit(cut, end, "")


def _yaml_scalar(word: str) -> str:
    """``word`` as a YAML string scalar: plain when YAML would read it back as that string."""
    import yaml

    from kvtool.yamlio import safe_load

    if _PLAIN_YAML_WORD.fullmatch(word):
        try:
            if safe_load(word) == word:
                return word
        except yaml.YAMLError:
            pass
    return json.dumps(word)  # a JSON string is a valid double-quoted YAML scalar


def _yaml_scalar_is(written: str, token: SourceToken) -> bool:
    """The span, read as one YAML scalar, is the token's text (quotes and all)."""
    import yaml

    from kvtool.yamlio import safe_load

    try:
        value = safe_load(written)
    except yaml.YAMLError:
        return False
    return isinstance(value, (str, int, float)) and str(value) == token.text


def _read_back_problem(
    new_text: str,
    file: str | None,
    kind: InputKind,
    invocations: Sequence[Invocation],
    fixes: Sequence[Fix],
) -> str | None:
    """None when ``new_text`` reads back as ``invocations`` with ``fixes`` made, else why not."""
    from kvtool.audit.inputs import read_text

    try:
        found = read_text(new_text, file, input_format=kind)
    except KvtoolError as error:
        return f"the rewritten file would not read back ({error})"
    expected = [_expected_words(invocation, fixes) for invocation in invocations]
    if [[t.text for t in invocation.tokens] for invocation in found] != expected:
        return "the rewritten YAML would not read back as the fixed command, so it is left alone"
    return None


def _expected_words(invocation: Invocation, fixes: Sequence[Fix]) -> list[str]:
    """The invocation's words with the fixes that touch it made."""
    replacing = [fix for fix in fixes if not fix.insert_after]
    removed = {_token_key(t) for fix in replacing for t in fix.remove_tokens}
    first = {_token_key(fix.remove_tokens[0]): fix for fix in replacing if fix.remove_tokens}
    after = {_token_key(fix.remove_tokens[-1]): fix for fix in fixes if fix.insert_after}
    words: list[str] = []
    for token in invocation.tokens:
        key = _token_key(token)
        if key in first:
            words.extend(first[key].replacement)
        if key not in removed:
            words.append(token.text)
        if key in after:
            words.extend(after[key].replacement)
    return words


def _token_key(token: SourceToken) -> tuple[object, ...]:
    where = token.location
    return (token.text, where.file, where.line, where.column) if where else (token.text,)


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


def _merge(text: str, edits: list[_Edit], planned: list[_Edit]) -> list[_Edit] | None:
    """``edits`` plus ``planned``, or None when a planned edit overlaps another one.

    Two cuts that share only separators (two adjacent flow items may each claim the
    comma between them) are joined into one; any other overlap, a shared word or a
    replacement, is a conflict between fixes.
    """
    result = list(edits)
    for edit in planned:
        clashing = [other for other in result if _overlaps(edit, other)]
        if not clashing:
            result.append(edit)
            continue
        shared = [text[max(edit.start, o.start) : min(edit.end, o.end)] for o in clashing]
        if (
            edit.replacement
            or any(other.replacement for other in clashing)
            or any(part.strip(", \t") for part in shared)
        ):
            return None
        result = [other for other in result if other not in clashing]
        result.append(
            _Edit(
                min(edit.start, *(o.start for o in clashing)),
                max(edit.end, *(o.end for o in clashing)),
                "",
            )
        )
    return result


def _diff(before: str, after: str, name: str) -> str:
    return unified_diff(before, after, name)


_NO_NEWLINE = "\\ No newline at end of file\n"


def unified_diff(before: str, after: str, name: str) -> str:
    """A unified diff ``patch`` and ``git apply`` accept, of the texts exactly as written.

    Lines end only at LF, as ``patch`` reads them, so a CR stays part of its line; a last
    line without a newline gets the ``\\ No newline at end of file`` marker.
    """
    if before == after:
        return ""
    pieces: list[str] = []
    for line in difflib.unified_diff(
        _lf_lines(before),
        _lf_lines(after),
        fromfile=name if name.startswith("/") else f"a/{name}",
        tofile=name if name.startswith("/") else f"b/{name}",
    ):
        pieces.append(line if line.endswith("\n") else line + "\n" + _NO_NEWLINE)
    return "".join(pieces)


def _lf_lines(text: str) -> list[str]:
    lines = text.split("\n")
    ends = [line + "\n" for line in lines[:-1]]
    return [*ends, lines[-1]] if lines[-1] else ends


_LINE_BREAK = re.compile(r"(\r\n|\n)")


def keep_line_endings(raw: str, fixed: str) -> str:
    """``fixed`` (an edit of ``raw`` as the readers read it: ``fsio.reader_text``) with every
    line the edit left alone written byte for byte as in ``raw``: CRLF, a lone CR, a BOM,
    a missing final newline all stay. A changed line keeps the ending of the line it
    replaces.
    """
    bom = BOM if raw.startswith(BOM) else ""
    parts = _LINE_BREAK.split(raw[len(bom) :])
    old_lines, old_endings = parts[0::2], [*parts[1::2], ""]
    new_lines = fixed.split("\n")
    default = old_endings[0] or "\n"
    last = len(new_lines) - 1
    pieces: list[str] = []
    matcher = difflib.SequenceMatcher(None, old_lines, new_lines, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            pieces += [old_lines[i] + old_endings[i] for i in range(i1, i2)]
            continue
        for j in range(j1, j2):
            paired = i1 + (j - j1)
            ending = old_endings[min(paired, i2 - 1)] if i2 > i1 else default
            if j == last:
                ending = ""
            elif not ending:
                ending = default
            pieces.append(new_lines[j] + ending)
    return bom + "".join(pieces)
