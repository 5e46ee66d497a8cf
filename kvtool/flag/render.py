"""The ``kvtool flag`` report kind: text and JSON renderings of
:mod:`kvtool.flag.history` results (see :mod:`kvtool.output`).

JSON schema version 1: ``{"schema_version", "tool", "found", ...}`` where a found name
adds every :class:`~kvtool.flag.history.History` field and an unknown one adds
``name``, ``oldest_table``, ``newest_table`` and ``nearest``
(``docs/schemas/flag.schema.json``).
"""

from __future__ import annotations

import json
from typing import Any

import msgspec
from rich.console import Console

from kvtool import __version__
from kvtool.flag.history import History, Unknown, removal_kept
from kvtool.output.kinds import ReportKind
from kvtool.termsafe import terminal_line

SCHEMA_VERSION = 1

_KIND_WORDS = {
    "flag": "flag",
    "env_var": "environment variable",
    "connector": "KV connector",
    "tier": "offload tier type",
}


def _document(result: History | Unknown) -> dict[str, Any]:
    return {
        "tool": {"name": "kvtool", "version": __version__},
        "found": isinstance(result, History),
        **msgspec.to_builtins(result),
    }


def _schema() -> dict[str, Any]:
    """Tool and ``found``, then the fields of a History (found) or of an Unknown (not)."""
    (found, unknown), defs = msgspec.json.schema_components(
        (History, Unknown), ref_template="#/$defs/{name}"
    )
    return {
        "type": "object",
        "properties": {
            "tool": {
                "type": "object",
                "properties": {"name": {"type": "string"}, "version": {"type": "string"}},
                "required": ["name", "version"],
            },
            "found": {"type": "boolean"},
        },
        "required": ["tool", "found"],
        "oneOf": [
            {**found, "properties": {"found": {"const": True}}},
            {**unknown, "properties": {"found": {"const": False}}},
        ],
        "$defs": defs,
    }


def _value(value: Any) -> str:
    if value is None:
        return "unset"
    if isinstance(value, list):
        return " ".join(str(v) for v in value) if value else "(none)"
    return json.dumps(value)


def _first_seen(found: History) -> str:
    if found.first_seen == found.oldest_table:
        return f"{found.first_seen} (at or before: the oldest release table)"
    return found.first_seen


def _deprecation(found: History) -> list[str]:
    if found.deprecated_since is None:
        return []
    lines = [f"deprecated    since {found.deprecated_since}"]
    if found.deprecation_message:
        lines.append(f"              vLLM says: {found.deprecation_message}")
    kept = removal_kept(found)
    if kept is False:
        really = (
            f"really removed in {found.gone_at}"
            if found.gone_at
            else f"still present in {found.newest_table}, the newest release table"
        )
        lines.append(
            f"              the text promised removal in {found.promised_removal}; {really}"
        )
    return lines


def _hma(value: bool | None) -> str:
    return "decided at import time" if value is None else ("yes" if value else "no")


def _change(change: Any) -> str:
    if change.attribute == "first_seen":
        return "first seen"
    if change.attribute == "supports_hma":
        return f"SupportsHMA: {_hma(change.before)} -> {_hma(change.after)}"
    if change.attribute == "present":
        return "appears again" if change.after else "removed"
    if change.attribute == "deprecated":
        return "deprecated" if change.after else "no longer deprecated"
    if change.attribute == "canonical":
        return f"now an alias of {change.after} (was {change.before})"
    if change.attribute == "choices" and change.after is None:
        return "choices no longer enforced by argparse (any text parses)"
    if change.attribute == "choices" and change.before is None:
        return f"choices enforced by argparse: {_value(change.after)}"
    if change.attribute == "known_values" and change.before is None:
        return f"values the field's type names (not enforced): {_value(change.after)}"
    if change.attribute in ("choices", "known_values") and change.before and change.after:
        added = [v for v in change.after if v not in change.before]
        dropped = [v for v in change.before if v not in change.after]
        parts = [
            f"+{' +'.join(added)}" if added else "",
            f"-{' -'.join(dropped)}" if dropped else "",
        ]
        return f"{change.attribute.replace('_', ' ')}: " + " ".join(p for p in parts if p)
    if change.attribute == "config_default":
        # Recorded only where the CLI default replaces the config's: null means the two agree.
        shown = [
            _value(v) if v is not None else "the CLI default" for v in (change.before, change.after)
        ]
        return f"config default behind the CLI default: {shown[0]} -> {shown[1]}"
    word = change.attribute.replace("_", " ")
    return f"{word}: {_value(change.before)} -> {_value(change.after)}"


def text_report(result: History | Unknown) -> str:
    span = f"vLLM {result.oldest_table}..{result.newest_table}"
    if isinstance(result, Unknown):
        near = ", ".join(result.nearest) if result.nearest else "none close"
        # The name is the user's text: a terminal escape in it must not reach the screen.
        name = terminal_line(result.name)
        return f"{name}: in no release table ({span}). Nearest names: {near}\n"
    kind = _KIND_WORDS[result.kind]
    head = f"{terminal_line(result.name)} ({kind}"
    head += f", a spelling of {result.canonical})" if result.canonical else ")"
    lines = [head, f"first seen    {_first_seen(result)}"]
    lines += _deprecation(result)
    if result.gone_at:
        lines.append(f"gone at       {result.gone_at} (last in {result.last_seen})")
    else:
        lines.append(f"gone at       - (present in {result.newest_table}, the newest table)")
    if len(result.present) > 1:
        spans = ", ".join(f"{s.first}..{s.last}" for s in result.present)
        lines.append(f"present in    {spans}")
    if result.replacement:
        lines.append(f"replacement   {result.replacement}")
    changes = [c for c in result.changes if c.attribute != "deprecation_message" or c.before]
    if changes:
        lines.append(f"changes       ({span})")
        lines += [f"  {c.version:<10}  {_change(c)}" for c in changes]
    return "\n".join(lines) + "\n"


def _print_text(result: History | Unknown, console: Console) -> None:
    # Plain text as written: names like [--foo] are not rich markup.
    console.file.write(text_report(result))


FLAG: ReportKind[History | Unknown] = ReportKind(
    name="flag",
    title="kvtool flag JSON document",
    schema_version=SCHEMA_VERSION,
    text=_print_text,
    document=_document,
    schema=_schema,
)
