"""kvtool inspect-image: which KV connectors a vLLM image bundles.

Public API for other kvtool commands (the audit's IM rules). Imports stay inside the
functions so importing this package (as ``kvtool audit`` does) pulls in no HTTP or
container client:

- :func:`connector_verdicts` -- inspect an image now, one verdict per connector;
- :func:`load_image_verdicts` -- the verdicts of a saved ``--output-format json`` report.

The full pipeline is :func:`kvtool.image.inspect.inspect` with an ``InspectRequest``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kvtool.image.model import ConnectorVerdict

__all__ = ["connector_verdicts", "load_image_verdicts"]


def connector_verdicts(
    image: str,
    *,
    platform: str = "linux/amd64",
    runtime_check: bool = False,
    python: Path | None = None,
    insecure: bool = False,
) -> dict[str, ConnectorVerdict]:
    """Verdicts for ``image`` (a reference, ``docker save`` tar or OCI layout), keyed
    ``"lmcache"``, ``"nixl"``, ``"mooncake"``.

    Step 1 always runs; ``runtime_check`` adds the container probe, ``python`` the
    probe in a local interpreter instead. Registry and engine failures never raise:
    they become ``unknown`` verdicts with the reason. Bad input raises KvtoolError.
    """
    from kvtool.image.inspect import InspectRequest, ReadOptions, Runtime, inspect
    from kvtool.image.manifest import Platform

    runtime: Runtime = "python" if python is not None else ("engine" if runtime_check else "none")
    report = inspect(
        InspectRequest(
            image=image,
            runtime=runtime,
            python=python,
            read=ReadOptions(platform=Platform.parse(platform), insecure=insecure),
        )
    )
    return {v.connector.value: v for v in report.verdicts}


def load_image_verdicts(path: Path) -> dict[str, ConnectorVerdict]:
    """The verdicts of a report ``kvtool inspect-image --output-format json`` wrote."""
    from pydantic import ValidationError

    from kvtool.errors import KvtoolError
    from kvtool.image.model import InspectionReport

    try:
        report = InspectionReport.model_validate_json(path.read_bytes())
    except OSError as exc:
        raise KvtoolError(f"{path}: cannot read the image verdicts: {exc.strerror}") from None
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "the top level"
        raise KvtoolError(
            f"{path}: not an inspect-image JSON report ({where}: {first['msg']})"
        ) from None
    return {v.connector.value: v for v in report.verdicts}
