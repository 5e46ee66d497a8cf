"""Make text from inputs safe to show on a terminal.

A file name, a flag value or a line of a script can carry escape sequences: written
raw, ``ESC[2J`` clears the screen and a hostile script could erase kvtool's findings
and print "All checks passed". Every control character (C0, DEL, C1) and every
bidirectional-override character is shown as a visible escape (``\\x1b``,
``\\u202e``) instead; tab and, in multi-line text, newline stay.
"""

from __future__ import annotations

import re

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


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    if 0xDC80 <= code <= 0xDCFF:  # the byte it stands for
        code -= 0xDC00
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def terminal_text(text: str) -> str:
    """``text`` with control characters escaped; newlines and tabs kept."""
    return _UNSAFE.sub(_escape, text)


def terminal_line(text: str) -> str:
    """``text`` as one line: control characters, newlines included, escaped."""
    return _UNSAFE_ONE_LINE.sub(_escape, text)
