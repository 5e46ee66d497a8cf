"""Render a chart's templates with helm-python-sdk (the ``helm`` extra), when it is installed.

helm-python-sdk embeds Helm's own Go template engine as a shared library, so a chart
renders as ``helm template`` renders it, offline (https://pypi.org/project/helm-python-sdk/).
Templates are rendered with the chart's default values; the report says so, and how
to audit other values (``helm template ... -f values.yaml | kvtool audit -``). Without
the extra, templates are skipped with that command.
"""

from __future__ import annotations

import importlib.util
from functools import cache
from pathlib import Path

from kvtool.errors import KvtoolError

CHART_FILE = "Chart.yaml"
TEMPLATES = "templates"
RENDERED_SUFFIX = "#rendered"  # names a rendered template in the report (not a file on disk)


@cache
def available() -> bool:
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

    None when the extra is not installed or the file is not in a chart; an empty
    string when the template renders to nothing (a disabled feature). Raises
    ``KvtoolError`` when Helm cannot render the chart.
    """
    if not available():
        return None
    root = chart_root(template)
    if root is None:
        return None
    relative = template.resolve().relative_to(root.resolve()).as_posix()
    for key, text in _render(root.resolve()).items():
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
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise KvtoolError(f"{root}: helm could not render the chart: {first}") from None
    return rendered
