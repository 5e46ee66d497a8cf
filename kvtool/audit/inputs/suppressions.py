"""Inline suppressions: ``# kvtool: ignore[CODE,...] reason``.

A comment at the end of a line silences that line; a comment on a line of its own
silences the next line that holds code. In shell scripts a comment cannot sit
inside a continued command, so one standing right above a command silences the
whole command (scope "invocation"). The Kubernetes annotation
``kvtool.io/ignore: "CODE=reason,CODE2=reason"`` silences its workload. A comment
``# kvtool: ignore-file[CODE,...] reason`` anywhere in a file silences those rules for the
whole file, as hadolint's ``# hadolint global ignore=`` does; without a code list it
silences every rule.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from kvtool.audit.model import Location, Suppression

_INLINE = re.compile(r"kvtool:\s*ignore\[([^\]]*)\]\s*(.*)")
ANNOTATION = "kvtool.io/ignore"
# A new item starts with "code-or-name=" or is a bare code such as "SZ001"; any other
# comma belongs to the reason before it.
_ANNOTATION_ITEM = re.compile(r"\s*([A-Za-z][A-Za-z0-9-]*\s*=|[A-Z]+[0-9]+\s*$)")


_FILE_WIDE = re.compile(
    r"(?:^|[ \t])#[^\n]*?kvtool:[ \t]*ignore-file(?:\[([^\]\n]*)\])?[ \t]*([^\n]*)", re.MULTILINE
)


def file_suppressions(text: str, file: str | None) -> list[Suppression]:
    """The file-wide suppressions of ``text``: one per ``kvtool: ignore-file`` comment."""
    if "ignore-file" not in text:
        return []
    found = []
    for match in _FILE_WIDE.finditer(text):
        written = match.group(1)
        codes = (
            ("ALL",)
            if written is None
            else tuple(code.strip() for code in written.split(",") if code.strip())
        )
        line = text.count("\n", 0, match.start()) + 1
        found.append(
            Suppression(
                codes=codes,
                reason=match.group(2).strip() or None,
                location=Location(file=file, line=line),
                scope="file",
            )
        )
    return found


def parse_comment(comment: str) -> tuple[tuple[str, ...], str | None] | None:
    """Codes and reason of one comment's text (without '#'), or None if it is no suppression."""
    match = _INLINE.search(comment)
    if not match:
        return None
    codes = tuple(code.strip() for code in match.group(1).split(",") if code.strip())
    reason = match.group(2).strip() or None
    return codes, reason


def yaml_comment_suppressions(text: str, file: str | None) -> list[Suppression]:
    """Suppressions written as YAML comments (PyYAML drops comments, so scan the lines).

    A '#' inside a quoted scalar is not a comment; lines are checked for a '#' that
    follows whitespace or starts the line, which is how YAML itself recognises them.
    """
    if "kvtool:" not in text:  # every suppression comment names it (see _INLINE)
        return []
    lines = text.split("\n")
    found: list[Suppression] = []
    for number, line in enumerate(lines, start=1):
        hash_at = _yaml_comment_start(line)
        if hash_at is None:
            continue
        parsed = parse_comment(line[hash_at + 1 :])
        if parsed is None:
            continue
        codes, reason = parsed
        standalone = not line[:hash_at].strip()
        target = _next_code_line(lines, number) if standalone else number
        found.append(
            Suppression(
                codes=codes,
                reason=reason,
                location=Location(file=file, line=number, column=hash_at + 1),
                scope="line",
                target_line=target,
            )
        )
    return found


def _yaml_comment_start(line: str) -> int | None:
    quote: str | None = None
    for index, char in enumerate(line):
        if quote:
            if char == quote:
                quote = None
        elif char in "'\"" and (index == 0 or line[index - 1] in " \t:[{,-"):
            quote = char
        elif char == "#" and (index == 0 or line[index - 1] in " \t"):
            return index
    return None


def _next_code_line(lines: list[str], after: int) -> int | None:
    for number in range(after + 1, len(lines) + 1):
        stripped = lines[number - 1].strip()
        if stripped and not stripped.startswith("#"):
            return number
    return None


def annotation_suppressions(value: str, location: Location | None) -> list[Suppression]:
    """``"SZ001=reason, CN010=other reason"`` -> one invocation-wide suppression per code."""
    found: list[Suppression] = []
    for item in _split_annotation(value):
        code, _, reason = item.partition("=")
        if code.strip():
            found.append(
                Suppression(
                    codes=(code.strip(),),
                    reason=reason.strip() or None,
                    location=location,
                    scope="invocation",
                )
            )
    return found


def _split_annotation(value: str) -> Iterable[str]:
    """Split on commas that start a new ``CODE=`` item, so reasons may contain commas."""
    items: list[str] = []
    for part in value.split(","):
        if items and not _ANNOTATION_ITEM.match(part):
            items[-1] += "," + part
        else:
            items.append(part)
    return items
