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
from functools import cache
from pathlib import Path
from typing import Literal

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
_MARK = "\x00"  # stands for one action while lines are sorted (never in YAML text)

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


def unrendered_text(text: str) -> tuple[str, tuple[str, ...]]:
    """The template with its actions out of the way, and the values it could not apply.

    A line that holds only actions (``{{- if .Values.x }}``, ``{{- include ... }}``)
    becomes blank, so line numbers still point into the template; an action inside a
    line becomes a shell variable (``${VALUES_MODEL_NAME}``), which the audit reads as a
    value known only at run time. An action over several lines keeps its line breaks.
    """
    values = tuple(dict.fromkeys(".Values" + m.group(1) for m in _VALUES_PATH.finditer(text)))
    placeholders: list[str] = []

    def mark(action: re.Match[str]) -> str:
        placeholders.append(_placeholder(action.group(1)))
        return _MARK + "\n" * action.group(0).count("\n")

    marked = _ACTION.sub(mark, text)
    lines: list[str] = []
    taken = iter(placeholders)
    for line in marked.split("\n"):
        count = line.count(_MARK)
        if count and not line.replace(_MARK, "").strip():
            for _ in range(count):
                next(taken)
            lines.append("")
            continue
        for _ in range(count):
            line = line.replace(_MARK, next(taken), 1)
        lines.append(line)
    return "\n".join(lines), values


def _placeholder(action: str) -> str:
    path = _VALUES_PATH.search(action)
    words = "values " + path.group(1) if path is not None else "template value"
    return "${" + _VARIABLE_WORD.sub("_", words).strip("_").upper() + "}"
