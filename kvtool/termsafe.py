"""Make text from inputs safe to show on a terminal, in a CI log and in rich output.

A file name, a flag value, a server's answer or a line of a script can carry escape
sequences: written raw, ``ESC[2J`` clears the screen and a hostile script could erase
kvtool's findings and print "All checks passed". Every control character (C0, DEL,
C1), every bidirectional-override character and every lone surrogate is shown as a
visible escape (``\\x1b``, ``\\u202e``) instead; tab and, in multi-line text, newline
stay. A line of a CI log that starts with ``::`` is a GitHub Actions workflow command
(``::add-mask::``, ``::error::``, ``::stop-commands::``), so a value that would start a
line with it gets its first colon escaped (``\\x3a:``): kvtool's own annotations are
the only workflow commands it prints.

Every value from input passes :func:`terminal_line` (one line) or
:func:`terminal_text` (newlines kept) before any stream; rich output takes the result
through :func:`plain` pieces, never through markup, so no input is parsed as markup
(rich's markup escaping and parsing are quadratic in a run of backslashes).
All of it is linear in the text.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.text import Text

# Lone surrogates too: \udc80-\udcff are the bytes of a file name or argument that
# were not UTF-8 (Python's surrogateescape); printed, they become those raw bytes
# again, and 0x9b is a C1 escape to many terminals.
_UNSAFE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)
_UNSAFE_ONE_LINE = re.compile(
    "[\x00-\x08\x0a-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e"
    "\u2066-\u2069\ud800-\udfff]"
)
# A patch keeps every CR as a byte: ``patch`` must see the lines as written (a CRLF end,
# a lone CR inside a quoted value). A CR moves no further than the line's start; the
# escape sequences that rewrite a screen start with ESC or a C1 control, escaped here.
_UNSAFE_PATCH = re.compile(
    "[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e"
    "\u2066-\u2069\ud800-\udfff]"
)
# A workflow command at the start of the value or of one of its lines (the runner
# trims blanks before it looks).
_WORKFLOW_COMMAND = re.compile(r"(?:^|(?<=\n))([ \t]*+):(?=:)")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    if 0xDC80 <= code <= 0xDCFF:  # the byte it stands for
        code -= 0xDC00
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _no_workflow_command(text: str) -> str:
    return _WORKFLOW_COMMAND.sub(r"\1\\x3a", text)


def terminal_text(text: str) -> str:
    """``text`` with control characters escaped; newlines and tabs kept."""
    return _no_workflow_command(_UNSAFE.sub(_escape, text))


def terminal_line(text: str) -> str:
    """``text`` as one line: control characters, newlines included, escaped."""
    return _no_workflow_command(_UNSAFE_ONE_LINE.sub(_escape, text))


def terminal_patch(text: str) -> str:
    """A unified diff as :func:`terminal_text` shows it, its CRs kept as bytes."""
    return _no_workflow_command(_UNSAFE_PATCH.sub(_escape, text))


def plain(*pieces: str | tuple[str, str]) -> Text:
    """A rich ``Text`` of one line from pieces, each shown through :func:`terminal_line`:
    a ``str`` unstyled, a ``(text, style)`` pair in that style. Nothing is parsed as
    markup, so a value from input is shown as written whatever brackets it holds."""
    from rich.text import Text

    text = Text()
    for piece in pieces:
        value, style = (piece, "") if isinstance(piece, str) else piece
        text.append(terminal_line(value), style=style or None)
    return text
