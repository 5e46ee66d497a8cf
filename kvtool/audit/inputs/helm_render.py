"""Render a chart's templates before they are audited, or say that they were not.

Three ways, the first that is there:

1. ``helm template`` when a ``helm`` binary is on PATH (the usual case on an operator's
   machine; https://helm.sh/docs/helm/helm_template/);
2. helm-python-sdk (the ``helm`` extra), which embeds Helm's own Go template engine as a
   shared library, so a chart renders as ``helm template`` renders it, offline
   (https://pypi.org/project/helm-python-sdk/);
3. neither: the template's text is read as it stands, each template action
   (``{{ .Values.x }}``) taken as a value known only at run time and each action-only
   line (``{{- if ... }}``) left out, so the server is still found; the values that could
   not be applied are named, and the template counts as not audited.

Templates are rendered with the chart's default values; the report says so, and how to
audit other values (``helm template ... -f values.yaml | kvtool audit -``).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any, Literal

from kvtool.errors import KvtoolError

CHART_FILE = "Chart.yaml"
TEMPLATES = "templates"
RENDERED_SUFFIX = "#rendered"  # names a rendered template in the report (not a file on disk)
# The release name `helm template` is given; templates that print it show this.
RELEASE_NAME = "kvtool-audit"
# A chart renders in well under a second; a hung binary must not hang the audit.
_HELM_TIMEOUT_S = 60
_SOURCE = re.compile(r"^# Source: (\S+)\s*$", re.MULTILINE)
_DOCUMENT = re.compile(r"^---[ \t]*$", re.MULTILINE)
# One template action, trim markers included: {{ .Values.x }}, {{- if .Values.y -}}.
_ACTION = re.compile(r"\{\{-?(.*?)-?\}\}", re.DOTALL)
_VALUES_PATH = re.compile(r"\.Values((?:\.[A-Za-z_][\w-]*)+)")
_VARIABLE_WORD = re.compile(r"[^A-Za-z0-9]+")

Renderer = Literal["helm", "helm-python-sdk"]


def renderer() -> Renderer | None:
    """Which renderer this machine has: a ``helm`` binary first, then the helm extra."""
    if _helm_binary() is not None:
        return "helm"
    return "helm-python-sdk" if _sdk_available() else None


def available() -> bool:
    return renderer() is not None


def _helm_binary() -> str | None:
    return shutil.which("helm")


@cache
def _sdk_available() -> bool:
    return importlib.util.find_spec("helm_python") is not None


def chart_root(template: Path) -> Path | None:
    """The chart a file under ``CHART/templates/`` belongs to, or None."""
    return _chart_of(template.parent)


@cache
def _chart_of(directory: Path) -> Path | None:
    if directory.name == TEMPLATES and (directory.parent / CHART_FILE).is_file():
        return directory.parent
    return None if directory.parent == directory else _chart_of(directory.parent)


def rendered_template(template: Path) -> str | None:
    """The manifest ``template`` renders to with its chart's default values.

    None when no renderer is here or the file is not in a chart; an empty string when
    the template renders to nothing (a disabled feature). Raises ``KvtoolError`` when
    Helm cannot render the chart.
    """
    how = renderer()
    if how is None:
        return None
    root = chart_root(template)
    if root is None:
        return None
    relative = template.resolve().relative_to(root.resolve()).as_posix()
    rendered = _render_with_binary(root.resolve()) if how == "helm" else _render(root.resolve())
    for key, text in rendered.items():
        # Helm keys templates as "<chart name>/templates/x.yaml".
        if key.split("/", 1)[-1] == relative:
            return text
    return ""


@cache
def _render(root: Path) -> dict[str, str]:
    from helm_python.chart import Chart
    from helm_python.errors import HelmError

    try:
        rendered: dict[str, str] = Chart.load(str(root)).render()
    except HelmError as error:
        raise KvtoolError(f"{root}: helm could not render the chart: {_first(error)}") from None
    return rendered


@cache
def _render_with_binary(root: Path) -> dict[str, str]:
    """``helm template`` output split per template (its ``# Source:`` comments)."""
    helm = _helm_binary()
    assert helm is not None
    try:
        proc = subprocess.run(
            [helm, "template", RELEASE_NAME, str(root)],
            capture_output=True,
            text=True,
            timeout=_HELM_TIMEOUT_S,
            env={**os.environ, "HELM_NO_PLUGINS": "1"},
        )
    except subprocess.TimeoutExpired:
        raise KvtoolError(f"{root}: helm template did not finish in {_HELM_TIMEOUT_S} s") from None
    except OSError as error:
        raise KvtoolError(f"{root}: helm template could not run: {error}") from None
    if proc.returncode != 0:
        raise KvtoolError(f"{root}: helm could not render the chart: {_first(proc.stderr)}")
    return split_sources(proc.stdout)


def split_sources(stream: str) -> dict[str, str]:
    """``helm template``'s stream -> template path -> its documents (in stream order)."""
    out: dict[str, list[str]] = {}
    for document in _DOCUMENT.split(stream):
        source = _SOURCE.search(document)
        if source is not None:
            out.setdefault(source.group(1), []).append(document.strip("\n"))
    return {key: "\n---\n".join(docs) + "\n" for key, docs in out.items()}


def _first(error: object) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


# -- neither renderer: read the template's text ----------------------------------------------


def default_values(template: Path) -> dict[str, Any]:
    """The chart's ``values.yaml`` (its defaults), or {} when it has none or it is unreadable."""
    root = chart_root(template)
    if root is None:
        return {}
    import yaml

    from kvtool.yamlio import safe_load

    try:
        loaded = safe_load((root / "values.yaml").read_text(encoding="utf-8", errors="replace"))
    except (OSError, yaml.YAMLError, RecursionError):  # no defaults to apply
        return {}
    return loaded if isinstance(loaded, dict) else {}


def unrendered_text(
    text: str, values: Mapping[str, Any] | None = None
) -> tuple[str, tuple[str, ...]]:
    """The template with the actions it can apply applied, and the values it could not.

    Applied from the chart's default ``values`` (what ``helm template`` would use): a plain
    value (``{{ .Values.model | quote }}``, ``{{ .Release.Name }}``, ``default``) and an
    ``if`` / ``with`` on one value, whose branch not taken is left out. Any other action
    inside a line becomes a shell variable (``${VALUES_MODEL_NAME}``), which the audit
    reads as a value known only at run time; a line holding only actions becomes blank,
    so line numbers still point into the template.
    """
    evaluator = _Evaluator(values or {})
    out: list[str] = []
    position = 0
    line_parts: list[str] = []
    line_has_text = False
    line_has_action = False
    for match in _ACTION.finditer(text):
        for piece in _split_lines(text[position : match.start()]):
            if piece == "\n":
                out.append(_finish(line_parts, line_has_text, line_has_action))
                line_parts, line_has_text, line_has_action = [], False, False
                continue
            if evaluator.active:
                line_parts.append(piece)
                line_has_text = line_has_text or bool(piece.strip())
        line_has_action = True
        shown = evaluator.action(match.group(1).strip())
        if shown is not None and evaluator.active:
            line_parts.append(shown)
            # A line that is only a runtime placeholder (`{{ toYaml .Values.x | nindent }}`)
            # stays blank: its value is a YAML block the reader cannot know.
            line_has_text = line_has_text or not _PLACEHOLDER.fullmatch(shown)
        for _ in range(match.group(0).count("\n")):  # an action over several lines
            out.append(_finish(line_parts, line_has_text, line_has_action))
            line_parts, line_has_text = [], False
        position = match.end()
    for piece in _split_lines(text[position:]):
        if piece == "\n":
            out.append(_finish(line_parts, line_has_text, line_has_action))
            line_parts, line_has_text, line_has_action = [], False, False
        elif evaluator.active:
            line_parts.append(piece)
            line_has_text = line_has_text or bool(piece.strip())
    out.append(_finish(line_parts, line_has_text, line_has_action))
    return "\n".join(out), tuple(evaluator.unapplied)


def _split_lines(chunk: str) -> list[str]:
    return [p for p in re.split(r"(\n)", chunk) if p]


def _finish(parts: list[str], has_text: bool, has_action: bool) -> str:
    """A line made only of actions that printed nothing becomes blank (valid YAML)."""
    line = "".join(parts)
    return "" if has_action and not has_text else line


class _Evaluator:
    """The few template actions that need no template engine: plain values and simple
    conditions over the chart's default values; ``active`` says whether output is kept."""

    def __init__(self, values: Mapping[str, Any]) -> None:
        self.values = values
        # One entry per open block: (whether its output is kept, whether a branch of an
        # if chain was taken already (None: the condition was not known)).
        self.blocks: list[tuple[bool, bool | None]] = []
        self.unapplied: dict[str, None] = {}

    @property
    def active(self) -> bool:
        return all(kept for kept, _ in self.blocks)

    def action(self, body: str) -> str | None:
        """What the action prints (None: nothing), after updating the block state."""
        body = body.strip("-").strip()
        if body.startswith("/*") or not body:
            return None
        keyword, _, rest = body.partition(" ")
        if keyword in {"if", "with"}:
            taken = self._truth(rest)
            self.blocks.append((taken is not False, taken))
            return None
        if keyword == "range":
            items = self._truth(rest)
            self.blocks.append((items is not False, items))
            return None
        if keyword in {"define", "block"}:
            self.blocks.append((keyword == "block", None))
            return None
        if keyword == "else":
            if self.blocks:
                _, taken = self.blocks.pop()
                condition = rest.removeprefix("if ").strip() if rest.startswith("if ") else ""
                now = self._truth(condition) if condition else True
                if taken is True:
                    self.blocks.append((False, True))
                elif taken is None:
                    self.blocks.append((True, None))
                else:
                    self.blocks.append((now is not False, now))
            return None
        if keyword == "end":
            if self.blocks:
                self.blocks.pop()
            return None
        value = self._value(body)
        if value is _UNKNOWN:
            return _placeholder(body)
        return None if value is None else str(value)

    def _truth(self, expression: str) -> bool | None:
        negate = expression.startswith("not ")
        value = self._value(expression.removeprefix("not ").strip())
        if value is _UNKNOWN:
            return None
        truth = bool(value) and value != 0
        return not truth if negate else truth

    def _value(self, expression: str) -> Any:
        """A pipeline of one value and simple functions, or ``_UNKNOWN``."""
        stages = [stage.strip() for stage in expression.split("|")]
        head = stages[0].split()
        value: Any
        if len(head) == 3 and head[0] == "default":  # default "x" .Values.y
            value = self._operand(head[2])
            fallback = self._operand(head[1])
            value = fallback if value in (None, "", _MISSING) else value
        elif len(head) == 2 and head[0] in _SCALAR_FUNCTIONS:  # quote .Values.x
            value = _SCALAR_FUNCTIONS[head[0]](self._operand(head[1]))
        elif len(head) == 1:
            value = self._operand(head[0])
        else:
            value = _UNKNOWN
        for stage in stages[1:]:
            words = stage.split()
            if value is _UNKNOWN:
                break
            if len(words) == 2 and words[0] == "default":
                fallback = self._operand(words[1])
                value = fallback if value in (None, "", _MISSING) else value
            elif len(words) == 1 and words[0] in _SCALAR_FUNCTIONS:
                value = _SCALAR_FUNCTIONS[words[0]](value)
            else:
                value = _UNKNOWN
        if value is _MISSING:
            return None  # Helm prints an unset value as nothing
        if value is _UNKNOWN or isinstance(value, (dict, list)):
            for path in _VALUES_PATH.finditer(expression):
                self.unapplied[".Values" + path.group(1)] = None
            return _UNKNOWN
        return value

    def _operand(self, word: str) -> Any:
        if word.startswith('"') and word.endswith('"') and len(word) >= 2:
            return word[1:-1]
        if word == ".Release.Name":
            return RELEASE_NAME
        if word.startswith(".Values."):
            node: Any = self.values
            for key in word.removeprefix(".Values.").split("."):
                if not isinstance(node, Mapping) or key not in node:
                    return _MISSING
                node = node[key]
            return _UNKNOWN if node is _UNKNOWN else node
        if re.fullmatch(r"-?\d+(?:\.\d+)?|true|false", word):
            return {"true": True, "false": False}.get(word, word)
        return _UNKNOWN


class _Sentinel:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


_UNKNOWN: Any = _Sentinel("UNKNOWN")  # the value depends on what this reader cannot run
_MISSING: Any = _Sentinel("MISSING")  # no such key in the values: Helm prints nothing


def _quote(value: Any) -> Any:
    if value is _UNKNOWN:
        return value
    return '"' + ("" if value is _MISSING or value is None else str(value)) + '"'


_SCALAR_FUNCTIONS: dict[str, Any] = {
    "quote": _quote,
    "squote": lambda v: v if v is _UNKNOWN else "'" + ("" if v is _MISSING else str(v)) + "'",
    "toString": lambda v: v if v in (_UNKNOWN, _MISSING) else str(v),
    "lower": lambda v: v if not isinstance(v, str) else v.lower(),
    "upper": lambda v: v if not isinstance(v, str) else v.upper(),
    "trim": lambda v: v if not isinstance(v, str) else v.strip(),
}


_PLACEHOLDER = re.compile(r"\$\{[A-Z0-9_]+\}")


def _placeholder(action: str) -> str:
    path = _VALUES_PATH.search(action)
    words = "values " + path.group(1) if path is not None else "template value"
    return "${" + _VARIABLE_WORD.sub("_", words).strip("_").upper() + "}"
