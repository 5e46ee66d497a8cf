"""kvtool inspect-image: which KV connectors a vLLM image bundles.

Public API for other kvtool commands (the audit's IM rules):

- :func:`connector_verdicts` -- one :class:`Verdict` per connector for an image;
- :func:`inspect` with an :class:`InspectRequest` -- the full :class:`InspectionReport`.
"""

from __future__ import annotations

from pathlib import Path

from kvtool.image.inspect import InspectRequest, ReadOptions, Runtime, inspect, read_image_facts
from kvtool.image.manifest import Platform
from kvtool.image.model import Connector, ConnectorVerdict, InspectionReport, Verdict

__all__ = [
    "Connector",
    "ConnectorVerdict",
    "InspectRequest",
    "InspectionReport",
    "Platform",
    "ReadOptions",
    "Verdict",
    "connector_verdicts",
    "inspect",
    "read_image_facts",
]


def connector_verdicts(
    image: str,
    *,
    platform: str = "linux/amd64",
    runtime_check: bool = False,
    python: Path | None = None,
    insecure: bool = False,
) -> dict[Connector, ConnectorVerdict]:
    """Verdicts for ``image`` (a reference, ``docker save`` tar or OCI layout).

    Step 1 always runs; ``runtime_check`` adds the container probe, ``python`` the
    probe in a local interpreter instead. Never raises for registry or engine
    failures: those become ``unknown`` verdicts with the reason.
    """
    runtime: Runtime = "python" if python is not None else ("engine" if runtime_check else "none")
    report = inspect(
        InspectRequest(
            image=image,
            runtime=runtime,
            python=python,
            read=ReadOptions(platform=Platform.parse(platform), insecure=insecure),
        )
    )
    return {v.connector: v for v in report.verdicts}
