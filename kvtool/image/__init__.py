"""kvtool inspect-image: which KV connectors a vLLM image bundles.

Public API for other kvtool commands (the audit's IM rules):
:func:`load_image_verdicts`, the verdicts of a saved ``--output-format json`` report. Its
imports stay inside it so importing this package (as ``kvtool audit`` does) pulls in no
HTTP or container client. To inspect an image from Python, call
:func:`kvtool.image.inspect.inspect` with an ``InspectRequest``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kvtool.image.model import ConnectorVerdict

__all__ = ["load_image_distributions", "load_image_verdicts"]


def load_image_verdicts(path: Path) -> dict[str, ConnectorVerdict]:
    """The verdicts of a report ``kvtool inspect-image --output-format json`` wrote."""
    from pydantic import ValidationError

    from kvtool.errors import KvtoolError
    from kvtool.fsio import read_input_bytes
    from kvtool.image.model import InspectionReport
    from kvtool.nesting import check_json

    data = read_input_bytes(path)  # a regular file within the input size limit
    check_json(data, str(path))
    try:
        report = InspectionReport.model_validate_json(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "the top level"
        raise KvtoolError(
            f"{path}: not an inspect-image JSON report ({where}: {first['msg']})"
        ) from None
    return {v.connector.value: v for v in report.verdicts}


def load_image_distributions(path: Path) -> dict[str, str]:
    """The installed distributions (name -> version) an inspect-image report's probe found;
    empty when the probe did not run."""
    from kvtool.fsio import read_input_bytes
    from kvtool.image.model import InspectionReport

    report = InspectionReport.model_validate_json(read_input_bytes(path))
    return dict(report.probe.distributions) if report.probe is not None else {}
