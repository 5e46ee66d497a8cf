"""A POSIX-shell word splitter that keeps the source offsets of every word.

``shlex`` loses positions and knows nothing of ``$``-expansions, so this lexer does
the part of the shell grammar serve scripts use: quoting, backslash escapes, line
continuations, comments, command separators, redirections, here-documents and
``$``/``${...}``/``$(...)`` expansions. Expansions are resolved only from variables
assigned earlier in the same text; ``${VAR:+words}`` yields *conditional* words
(present only when VAR is set). It never executes anything.
"""

from __future__ import annotations

import re

import msgspec

from kvtool import limits
from kvtool.errors import KvtoolError

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ASSIGNMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=(.*)", re.DOTALL)
_REDIRECTION = re.compile(r"\d*(?:&>>|&>|>>|>&|<&|<<<|<<-|<<|>\||<>|>|<)")
_CONDITIONAL = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(:?\+)")
_OPERATOR_CHARS = ";&|()"
_WORD_END = " \t\n;&|()<>"
# Parameter-expansion operators, longest first so ":+" wins over ":".
_PARAM_OPS = (":+", ":-", ":=", ":?", "+", "-", "=", "?")
# Builtins whose NAME=value arguments are assignments the rest of the script sees.
_DECLARING = frozenset({"export", "declare", "typeset", "readonly", "local"})


class Word(msgspec.Struct, frozen=True):
    """One shell word after quote removal, with its span in the lexed text."""

    text: str
    start: int
    end: int  # exclusive
    conditional: bool = False  # from ${VAR:+...}: present only when VAR is set
    dynamic: bool = False  # holds an expansion whose value is not known statically


class Comment(msgspec.Struct, frozen=True):
    text: str  # without the leading '#'
    start: int  # offset of '#'
    end: int
    trailing: bool  # written after a word on the same line


class Command(msgspec.Struct):
    """A simple command: the words between two separators."""

    words: list[Word] = msgspec.field(default_factory=list)
    # Variables the script had exported before this command ran.
    exported: dict[str, Word] = msgspec.field(default_factory=dict)


class LexResult(msgspec.Struct):
    commands: list[Command]
    comments: list[Comment]


class _Lexer:
    def __init__(
        self,
        text: str,
        variables: dict[str, str] | None = None,
        budget: list[int] | None = None,
        nesting: int = 0,
    ) -> None:
        self.text = text
        self.pos = 0
        # Levels of ${VAR:+...} this lexer sits inside: each is a sub-lexer, so a
        # hostile script nesting thousands of them would exhaust Python's stack.
        self.nesting = nesting
        self.max_nesting = limits.SHELL_NESTING_DEPTH.count
        self.subshells = 0  # open "(" of subshells at the top level
        # Characters all words may still expand to (shared with sub-lexers): chained
        # variables (b=$a$a$a, c=$b$b$b, ...) grow geometrically from a few bytes. The
        # text itself is paid for (each character lands in a word at most twice: once
        # in a quoted part, once in the word), so only expansions draw on the limit.
        self.budget = (
            budget if budget is not None else [2 * len(text) + limits.SHELL_EXPANSION_BYTES.count]
        )
        self.variables: dict[str, str] = dict(variables or {})
        self.assigned_words: dict[str, Word] = {}
        self.exported: dict[str, Word] = {}
        self.comments: list[Comment] = []
        self.pending_heredocs: list[tuple[str, bool]] = []

    # -- errors -------------------------------------------------------------
    def _fail(self, message: str, offset: int) -> LexError:
        return LexError(message, offset)

    def _check_nesting(self, depth: int, offset: int) -> None:
        if depth > self.max_nesting:
            raise LexError(limits.SHELL_NESTING_DEPTH.message("shell nesting"), offset)

    def _joined(self, parts: list[str], offset: int) -> str:
        """``parts`` joined, paid for from the expansion budget before the copy is made."""
        self.budget[0] -= sum(map(len, parts))
        if self.budget[0] < 0:
            raise LexError(limits.SHELL_EXPANSION_BYTES.message("variable expansion"), offset)
        return "".join(parts)

    # -- top level ----------------------------------------------------------
    def run(self, end: int | None = None) -> list[Command]:
        stop = len(self.text) if end is None else end
        commands: list[Command] = []
        current = Command()
        line_has_word = False

        def finish() -> None:
            nonlocal current
            if current.words:
                current.exported = dict(self.exported)
                self._record_assignments(current.words)
                commands.append(current)
            current = Command()

        while self.pos < stop:
            char = self.text[self.pos]
            if char in " \t\r":
                self.pos += 1
            elif char == "\\" and self.text.startswith("\\\n", self.pos):
                self.pos += 2
            elif char == "\n":
                finish()
                self.pos += 1
                line_has_word = False
                self._skip_heredocs()
            elif char == "#":
                newline = self.text.find("\n", self.pos, stop)
                comment_end = stop if newline < 0 else newline
                self.comments.append(
                    Comment(
                        self.text[self.pos + 1 : comment_end], self.pos, comment_end, line_has_word
                    )
                )
                self.pos = comment_end
            elif char in _OPERATOR_CHARS and not self._at_redirection():
                finish()
                self._count_subshell(char)
                self.pos += 1
            elif self._at_redirection():
                self._skip_redirection(stop)
            else:
                words = self._read_words(stop)
                current.words.extend(words)
                line_has_word = True
        finish()
        return commands

    def _count_subshell(self, char: str) -> None:
        if char == "(":
            self.subshells += 1
            self._check_nesting(self.nesting + self.subshells, self.pos)
        elif char == ")" and self.subshells:
            self.subshells -= 1

    # -- assignments --------------------------------------------------------
    def _record_assignments(self, words: list[Word]) -> None:
        """Track ``X=1``, ``export X=1`` and ``export X`` so later words can expand $X."""
        declaring = words[0].text in _DECLARING
        candidates = words[1:] if declaring else words
        if not declaring and not all(_ASSIGNMENT.fullmatch(w.text) for w in words):
            return
        for word in candidates:
            match = _ASSIGNMENT.fullmatch(word.text)
            if match:
                name, value = match.group(1), match.group(2)
                self.variables[name] = value
                self.assigned_words[name] = word
                if declaring and words[0].text != "local":
                    self.exported[name] = word
            elif declaring and _NAME.fullmatch(word.text) and word.text in self.assigned_words:
                self.exported[word.text] = self.assigned_words[word.text]

    # -- redirections and here-documents ------------------------------------
    def _at_redirection(self) -> bool:
        return bool(_REDIRECTION.match(self.text, self.pos))

    def _skip_redirection(self, stop: int) -> None:
        match = _REDIRECTION.match(self.text, self.pos)
        assert match is not None
        operator = match.group(0).lstrip("0123456789")
        self.pos = match.end()
        if operator in ("<<", "<<-"):
            while self.pos < stop and self.text[self.pos] in " \t":
                self.pos += 1
            delimiter = self._read_words(stop)
            if delimiter:
                self.pending_heredocs.append((delimiter[0].text, operator == "<<-"))
            return
        if operator.endswith("&") and self.pos < stop and self.text[self.pos] in "0123456789-":
            while self.pos < stop and self.text[self.pos] in "0123456789-":
                self.pos += 1
            return
        while self.pos < stop and self.text[self.pos] in " \t":
            self.pos += 1
        self._read_words(stop)  # the redirection target is not an argument

    def _skip_heredocs(self) -> None:
        for delimiter, strip_tabs in self.pending_heredocs:
            while self.pos < len(self.text):
                newline = self.text.find("\n", self.pos)
                line_end = len(self.text) if newline < 0 else newline
                line = self.text[self.pos : line_end]
                self.pos = line_end + 1 if newline >= 0 else line_end
                if (line.lstrip("\t") if strip_tabs else line) == delimiter:
                    break
        self.pending_heredocs = []

    # -- words --------------------------------------------------------------
    def _read_words(self, stop: int) -> list[Word]:
        """Read one shell word; an unquoted lone ``${VAR:+a b}`` gives several words."""
        conditional = self._lone_conditional(stop)
        if conditional is not None:
            return conditional
        start = self.pos
        parts: list[str] = []
        dynamic = False
        is_conditional = False
        last_end = start
        while self.pos < stop:
            char = self.text[self.pos]
            if char in _WORD_END:
                break
            if char == "\\":
                if self.text.startswith("\\\n", self.pos):
                    self.pos += 2
                    continue
                if self.pos + 1 < stop:
                    parts.append(self.text[self.pos + 1])
                    self.pos += 2
                else:
                    self.pos += 1
            elif char == "'":
                close = self.text.find("'", self.pos + 1, stop)
                if close < 0:
                    raise self._fail("unterminated single quote", self.pos)
                parts.append(self.text[self.pos + 1 : close])
                self.pos = close + 1
            elif char == '"':
                text, dyn, cond = self._read_double_quoted(stop)
                parts.append(text)
                dynamic |= dyn
                is_conditional |= cond
            elif char == "$":
                text, dyn, cond = self._read_dollar(stop, quoted=False)
                parts.append(text)
                dynamic |= dyn
                is_conditional |= cond
            elif char == "`":
                parts.append(self._read_backtick(stop))
                dynamic = True
            else:
                parts.append(char)
                self.pos += 1
            last_end = self.pos
        if last_end == start:
            return []
        return [Word(self._joined(parts, start), start, last_end, is_conditional, dynamic)]

    def _lone_conditional(self, stop: int) -> list[Word] | None:
        """``${VAR:+--flag value}`` standing alone: word-split its alternate text."""
        match = _CONDITIONAL.match(self.text, self.pos, stop)
        if not match:
            return None
        close = self._find_brace_end(self.pos + 1, stop)
        if close + 1 < stop and self.text[close + 1] not in _WORD_END:
            return None
        name = match.group(1)
        inner_start, inner_end = match.end(), close
        self.pos = close + 1
        if name in self.variables and not self.variables[name] and match.group(2) == ":+":
            return []  # set but empty: ":+" expands to nothing
        self._check_nesting(self.nesting + 1, inner_start)
        sub = _Lexer(self.text, self.variables, self.budget, self.nesting + 1)
        sub.pos = inner_start
        words: list[Word] = []
        while sub.pos < inner_end:
            if sub.text[sub.pos] in " \t\n":
                sub.pos += 1
                continue
            if sub.text.startswith("\\\n", sub.pos):
                sub.pos += 2
                continue
            before = sub.pos
            words.extend(sub._read_words(inner_end))
            if sub.pos == before:  # an operator character inside the braces: keep it literal
                sub.pos += 1
        certain = name in self.variables
        return [
            Word(w.text, w.start, w.end, conditional=not certain, dynamic=w.dynamic) for w in words
        ]

    def _read_backtick(self, stop: int) -> str:
        """A `command` substitution, kept verbatim: its output is unknown statically."""
        close = self._find_backtick_end(stop)
        text = self.text[self.pos : close + 1]
        self.pos = close + 1
        return text

    def _read_double_quoted(self, stop: int) -> tuple[str, bool, bool]:
        opening = self.pos
        self.pos += 1
        parts: list[str] = []
        dynamic = conditional = False
        while self.pos < stop:
            char = self.text[self.pos]
            if char == '"':
                self.pos += 1
                return self._joined(parts, opening), dynamic, conditional
            if char == "\\" and self.pos + 1 < stop and self.text[self.pos + 1] in '$`"\\\n':
                if self.text[self.pos + 1] != "\n":
                    parts.append(self.text[self.pos + 1])
                self.pos += 2
            elif char == "$":
                text, dyn, cond = self._read_dollar(stop, quoted=True)
                parts.append(text)
                dynamic |= dyn
                conditional |= cond
            elif char == "`":
                parts.append(self._read_backtick(stop))
                dynamic = True
            else:
                parts.append(char)
                self.pos += 1
        raise self._fail("unterminated double quote", opening)

    def _read_dollar(self, stop: int, *, quoted: bool) -> tuple[str, bool, bool]:
        """Expand ``$...`` at self.pos: (text, dynamic, conditional)."""
        start = self.pos
        following = self.text[start + 1] if start + 1 < stop else ""
        if following == "'" and not quoted:
            return self._read_ansi_c(stop), False, False
        if following == "(":
            close = self._find_paren_end(start + 1, stop)
            self.pos = close + 1
            return self.text[start : close + 1], True, False
        if following == "{":
            return self._read_braced(stop)
        name = _NAME.match(self.text, start + 1, stop)
        if name:
            self.pos = name.end()
            if name.group(0) in self.variables:
                return self.variables[name.group(0)], False, False
            return self.text[start : self.pos], True, False
        if following and following in "@*#?$!0123456789-":
            self.pos = start + 2
            return self.text[start : self.pos], True, False
        self.pos = start + 1
        return "$", False, False

    def _read_braced(self, stop: int) -> tuple[str, bool, bool]:
        start = self.pos
        close = self._find_brace_end(start + 1, stop)
        self.pos = close + 1
        inner = self.text[start + 2 : close]
        raw = self.text[start : close + 1]
        name = _NAME.match(inner)
        if not name:
            return raw, True, False
        variable = name.group(0)
        rest = inner[name.end() :]
        if not rest:
            if variable in self.variables:
                return self.variables[variable], False, False
            return raw, True, False
        operator = next((op for op in _PARAM_OPS if rest.startswith(op)), None)
        if operator is None:
            return raw, True, False  # ${#X}, ${X%y}, ${X/a/b}: not worth modelling
        operand = _unquote_operand(rest[len(operator) :])
        value = self.variables.get(variable)
        empty_counts = operator.startswith(":")
        is_set = value is not None and (bool(value) or not empty_counts)
        if operator.endswith("+"):
            if value is None:
                return operand, False, True
            return (operand if is_set else ""), False, False
        if operator.endswith(("-", "=")):
            return (value if is_set and value is not None else operand), False, False
        if value is not None:
            return value, False, False
        return raw, True, False

    def _read_ansi_c(self, stop: int) -> str:
        self.pos += 2
        parts: list[str] = []
        escapes = {"n": "\n", "t": "\t", "\\": "\\", "'": "'", '"': '"', "r": "\r"}
        while self.pos < stop:
            char = self.text[self.pos]
            if char == "'":
                self.pos += 1
                return "".join(parts)
            if char == "\\" and self.pos + 1 < stop:
                parts.append(escapes.get(self.text[self.pos + 1], self.text[self.pos + 1]))
                self.pos += 2
            else:
                parts.append(char)
                self.pos += 1
        raise self._fail("unterminated $'...' quote", self.pos)

    # -- bracket matching ---------------------------------------------------
    def _find_matching(self, opening: int, stop: int, open_char: str, close_char: str) -> int:
        depth = 0
        position = opening
        while position < stop:
            char = self.text[position]
            if char == "\\":
                position += 2
                continue
            if char == "'":
                close = self.text.find("'", position + 1, stop)
                if close < 0:
                    break
                position = close + 1
                continue
            if char == '"':
                position += 1
                while position < stop and self.text[position] != '"':
                    position += 2 if self.text[position] == "\\" else 1
                position += 1
                continue
            if char == open_char:
                depth += 1
                self._check_nesting(self.nesting + depth, position)
            elif char == close_char:
                depth -= 1
                if depth == 0:
                    return position
            position += 1
        raise self._fail(f"unbalanced '{open_char}'", opening)

    def _find_brace_end(self, opening: int, stop: int) -> int:
        return self._find_matching(opening, stop, "{", "}")

    def _find_paren_end(self, opening: int, stop: int) -> int:
        return self._find_matching(opening, stop, "(", ")")

    def _find_backtick_end(self, stop: int) -> int:
        position = self.pos + 1
        while position < stop:
            if self.text[position] == "\\":
                position += 2
                continue
            if self.text[position] == "`":
                return position
            position += 1
        raise self._fail("unterminated backquote", self.pos)


def _unquote_operand(operand: str) -> str:
    """Quote removal for the word inside ``${X:-word}`` (no nested expansion)."""
    result: list[str] = []
    index = 0
    while index < len(operand):
        char = operand[index]
        if char == "'":
            close = operand.find("'", index + 1)
            close = len(operand) if close < 0 else close
            result.append(operand[index + 1 : close])
            index = close + 1
        elif char == '"':
            index += 1
        elif char == "\\" and index + 1 < len(operand):
            result.append(operand[index + 1])
            index += 2
        else:
            result.append(char)
            index += 1
    return "".join(result)


class LexError(KvtoolError):
    """A shell syntax problem at an offset of the lexed text (readers add file:line:col)."""

    def __init__(self, message: str, offset: int) -> None:
        super().__init__(message)
        self.message = message
        self.offset = offset


def lex(text: str, variables: dict[str, str] | None = None) -> LexResult:
    """Split ``text`` into simple commands of words; raises ``LexError`` on bad quoting."""
    lexer = _Lexer(text, variables)
    commands = lexer.run()
    return LexResult(commands, lexer.comments)
