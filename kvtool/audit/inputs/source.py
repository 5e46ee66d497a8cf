"""What a reader is given besides the text: the file's name, its folder, and the input set.

Readers stay pure: they read only ``text`` and this record. The ConfigMaps of every
Kubernetes file in the run are collected once, up front, so a container's ``envFrom``
or ``valueFrom.configMapKeyRef`` resolves against a ConfigMap written in another file.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from kvtool.audit.model import Location

# ConfigMap name -> data key -> (value, where the value was written).
ConfigMaps = Mapping[str, Mapping[str, tuple[str, Location | None]]]


@dataclass(frozen=True)
class ReadSource:
    file: str | None
    base_dir: Path | None = None
    configmaps: ConfigMaps = field(default_factory=dict)
