"""String and list literals of the languages deployment files are written in, read as argv.

Python, JSON, TOML and HCL write a command as a list of quoted words
(``["vllm", "serve", MODEL, "--port", str(PORT)]``) or as one quoted string
(``f"vllm serve {model} --port {port}"``). This module reads those literals out of raw
text, with the offsets each word was written at, and without parsing the language
around them: a word that is not a literal (a name, a call, an f-string field) is a
value computed at run time and is kept as a ``${...}`` word, which the rules treat as
unknown, never as a guess.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kvtool.audit.inputs.command_line import ArgvWord
from kvtool.audit.inputs.positions import LineIndex, OffsetMap

_QUOTES = "\"'"
_STRING_PREFIX = re.compile(r"[rRbBuUfF]{0,2}$")
_FIELD = re.compile(r"\{([^{}]*)\}")
_NOT_NAME = re.compile(r"[^A-Za-z0-9_]+")
# What an element that is not a literal runs as, when the language says so plainly.
_INTERPRETERS = frozenset({"sys.executable"})


@dataclass(frozen=True)
class StringLiteral:
    value: str  # escapes decoded; f-string fields as ${...} runtime words
    start: int  # offset of the opening quote
    end: int  # offset after the closing quote


def runtime_word(expression: str) -> str:
    """The ``${...}`` word standing for a value only known when the program runs."""
    name = _NOT_NAME.sub("_", expression.strip()).strip("_") or "value"
    return "${" + name + "}"


# A template field (Jinja, Ansible, Go templates: `{{ model }}`) in a command: its
# value is only known when the template is rendered. So is a whole word that is one
# str.format field (`--max-model-len {max_model_len}` in a Python-formatted .tpl, as
# Tandemn-Labs/tandemn-tuna's baseten_config.yaml.tpl writes its start_command), never
# `${VAR}` (shell's) or `{a,b}` (a brace expansion).
_TEMPLATE_FIELD = re.compile(r"\{\{-?\s*(.*?)\s*-?\}\}|(?<![\w${}])\{([A-Za-z_]\w*)\}(?![\w{}])")


def template_fields_as_runtime(script: str) -> tuple[str, OffsetMap]:
    """``script`` with each ``{{ expr }}`` (and whole-word ``{name}``) a runtime word, and
    a map from the new script's offsets back to ``script``'s (a runtime word points at its
    field)."""
    parts: list[str] = []
    anchors: list[tuple[int, int]] = []
    length = 0
    position = 0
    for match in _TEMPLATE_FIELD.finditer(script):
        for chunk, source in (
            (script[position : match.start()], position),
            (runtime_word(match.group(1) or match.group(2)), match.start()),
        ):
            anchors.append((length, source))
            parts.append(chunk)
            length += len(chunk)
        position = match.end()
    anchors.append((length, position))
    parts.append(script[position:])
    return "".join(parts), OffsetMap(tuple(anchors))


def string_at(text: str, quote_at: int) -> StringLiteral | None:
    """The quoted string that opens at ``text[quote_at]`` (``'``, ``"`` or a triple
    quote), or None when it does not close on its line (triple quotes: anywhere)."""
    quote = text[quote_at]
    prefix_start = quote_at
    while prefix_start > 0 and text[prefix_start - 1].isalpha():
        prefix_start -= 1
    prefix = text[prefix_start:quote_at]
    if not _STRING_PREFIX.match(prefix):
        prefix = ""
    formatted = "f" in prefix.lower()
    raw = "r" in prefix.lower()
    triple = text.startswith(quote * 3, quote_at)
    delimiter = quote * 3 if triple else quote
    position = quote_at + len(delimiter)
    chars: list[str] = []
    while position < len(text):
        char = text[position]
        if text.startswith(delimiter, position):
            value = "".join(chars)
            if formatted:
                value = _FIELD.sub(lambda m: runtime_word(m.group(1).split("!")[0]), value)
            return StringLiteral(value, quote_at, position + len(delimiter))
        if char == "\n" and not triple:
            return None
        if char == "\\" and not raw and position + 1 < len(text):
            escaped = text[position + 1]
            chars.append({"n": "\n", "t": "\t", "\n": ""}.get(escaped, escaped))
            position += 2
            continue
        chars.append(char)
        position += 1
    return None


def enclosing_list(text: str, offset: int) -> int | None:
    """The offset of the ``[`` (or ``(``) of the innermost list around ``offset``."""
    depth = 0
    position = offset - 1
    while position >= 0:
        char = text[position]
        if char in "])":
            depth += 1
        elif char in "[(":
            if depth == 0:
                return position
            depth -= 1
        elif char == "\n" and offset - position > _LIST_REACH:
            return None
        position -= 1
    return None


# How far back from the words ``"vllm", "serve"`` the list's opening bracket may be.
_LIST_REACH = 400


def list_words(text: str, opening: int, index: LineIndex) -> tuple[list[ArgvWord], int]:
    """The elements of the list literal opening at ``text[opening]`` as argv words, and
    the offset after its closing bracket. A literal string is its word; anything else
    (a name, a call) is a runtime word; a ``*rest`` splat is left out (its words are
    only known at run time)."""
    words: list[ArgvWord] = []
    position = opening + 1
    element_start: int | None = None
    depth = 0
    literal: StringLiteral | None = None
    while position < len(text):
        char = text[position]
        if char in _QUOTES:
            found = string_at(text, position)
            if found is None:
                break
            if depth == 0 and element_start is None:
                literal = (
                    StringLiteral(literal.value + found.value, literal.start, found.end)
                    if literal is not None
                    else found
                )
            position = found.end
            continue
        if char == "#" or text.startswith("//", position):
            newline = text.find("\n", position)
            position = len(text) if newline < 0 else newline
            continue
        if char in "[({":
            depth += 1
        elif char in "])}":
            if depth == 0:
                _close(words, text, literal, element_start, position, index)
                return words, position + 1
            depth -= 1
        elif char == "," and depth == 0:
            _close(words, text, literal, element_start, position, index)
            literal, element_start = None, None
        elif not char.isspace() and element_start is None and depth == 0:
            element_start = literal.start if literal is not None else position
            literal = None
        position += 1
    return words, position


def _close(
    words: list[ArgvWord],
    text: str,
    literal: StringLiteral | None,
    element_start: int | None,
    end: int,
    index: LineIndex,
) -> None:
    if element_start is None and literal is not None:
        span = (literal.start, literal.end)
        words.append(ArgvWord(literal.value, index.location(*span), span))
        return
    if element_start is None:
        return
    expression = text[element_start:end].strip()
    span = (element_start, element_start + len(expression))
    if expression.startswith("*"):
        return
    word = "python" if expression in _INTERPRETERS else runtime_word(expression)
    words.append(ArgvWord(word, index.location(*span), span))
