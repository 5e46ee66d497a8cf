"""``--target json``: the whole launch plan as one JSON object (schema: LaunchPlan).

Each process also carries ``argv``, so a script can start it without re-quoting.
"""

from __future__ import annotations

import json
from typing import Any

from kvtool.launch.plan import LaunchPlan

FILE_NAME = "launch.json"
SCHEMA_VERSION = 1


def build(plan: LaunchPlan) -> dict[str, Any]:
    data = plan.model_dump(mode="json")
    for process, dumped in zip(plan.processes, data["processes"], strict=True):
        dumped["argv"] = list(process.argv)
    return {"schema_version": SCHEMA_VERSION, **data}


def render(plan: LaunchPlan) -> dict[str, str]:
    return {FILE_NAME: json.dumps(build(plan), indent=2) + "\n"}
