"""One registry of report kinds: what each command renders, in which formats, and the
JSON Schema of its document.

A command's render module defines one :class:`ReportKind`; :data:`REPORT_KINDS` names
them all (lazily, so a command imports only its own). ``--output-format``, the schemas
under ``docs/schemas/`` (``scripts/gen_schemas.py``) and the contract test all read this
one table.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from rich.console import Console

from kvtool.output.jsontext import dumps_indented
from kvtool.output.streams import Output

R = TypeVar("R")

JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"

# Kind name (docs/schemas/<name>.schema.json) -> "module:ATTRIBUTE" holding its ReportKind.
REPORT_KINDS = {
    "audit": "kvtool.audit.render.kind:AUDIT",
    "rule": "kvtool.audit.render.kind:RULE",
    "size": "kvtool.sizing.render:SIZE",
    "verify": "kvtool.verify.render:VERIFY",
    "simulate": "kvtool.simulate.render:SIMULATE",
    "inspect-image": "kvtool.image.render:INSPECT_IMAGE",
    "launch": "kvtool.launch.render:LAUNCH",
    "launch-list": "kvtool.launch.render:LAUNCH_LIST",
    "flag": "kvtool.flag.render:FLAG",
    "upgrade": "kvtool.upgrade.render:UPGRADE",
}


@dataclass(frozen=True)
class ReportKind(Generic[R]):
    """How one command's report renders.

    ``document`` returns the JSON body; :func:`emit` puts ``schema_version`` first.
    ``schema`` returns the JSON Schema of that body (an object schema, ``$defs`` allowed).
    ``formats`` are extra machine formats, each returning the whole document as text.
    """

    name: str
    title: str
    schema_version: int
    text: Callable[[R, Console], None]
    document: Callable[[R], dict[str, Any]]
    schema: Callable[[], dict[str, Any]]
    formats: Mapping[str, Callable[[R], str]] = field(default_factory=dict)


def report_kind(name: str) -> ReportKind[Any]:
    module, _, attribute = REPORT_KINDS[name].partition(":")
    kind: ReportKind[Any] = getattr(importlib.import_module(module), attribute)
    return kind


def json_document(kind: ReportKind[R], report: R) -> dict[str, Any]:
    """The JSON document of ``report``: ``schema_version`` first, then the body."""
    body = kind.document(report)
    body.pop("schema_version", None)
    return {"schema_version": kind.schema_version, **body}


def render(kind: ReportKind[R], report: R, output_format: str) -> str:
    """A machine format of ``report`` as text (json or one of ``kind.formats``)."""
    if output_format == "json":
        return dumps_indented(json_document(kind, report)) + "\n"
    return kind.formats[output_format](report)


def emit(kind: ReportKind[R], report: R, output_format: str, out: Output) -> None:
    """Write ``report`` in ``output_format`` where ``out`` says (stdout or ``-o``)."""
    if output_format == "text":
        with out.report_console() as console:
            kind.text(report, console)
        return
    out.write(render(kind, report, output_format))


def document_schema(kind: ReportKind[Any]) -> dict[str, Any]:
    """The published JSON Schema: the body's schema with ``schema_version`` pinned."""
    body = dict(kind.schema())
    defs = dict(body.pop("$defs", {}))
    if "$ref" in body:  # msgspec puts the top object in $defs and refers to it
        body = dict(defs.pop(body.pop("$ref").rsplit("/", 1)[-1]))
    properties = {"schema_version": {"const": kind.schema_version}}
    properties.update({k: v for k, v in body.get("properties", {}).items()
                       if k != "schema_version"})
    required = ["schema_version", *(r for r in body.get("required", ()) if r != "schema_version")]
    schema: dict[str, Any] = {
        "$schema": JSON_SCHEMA_DIALECT,
        "title": f"{kind.title}, schema_version {kind.schema_version}",
        **{k: v for k, v in body.items() if k not in ("title", "properties", "required")},
        "type": "object",
        "properties": properties,
        "required": required,
    }
    if defs:
        schema["$defs"] = defs
    return schema
