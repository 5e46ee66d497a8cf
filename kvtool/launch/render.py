"""``kvtool launch``'s report kinds: the emitted config files and the recipe list.

The text of a launch is the config itself (the files, one after another), so
``kvtool launch ... > serve.sh`` keeps working; ``--output-format json`` wraps the same
files with the plan's identity for tools (see :mod:`kvtool.output`).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from pydantic import BaseModel
from rich.console import Console
from rich.markup import escape

from kvtool.launch.service import LaunchResult, RecipeSummary
from kvtool.output.kinds import ReportKind


class LaunchFile(BaseModel):
    name: str
    content: str


class LaunchDocument(BaseModel):
    recipe: str
    vllm_version: str
    target: str
    release_note: str | None
    warnings: list[str]
    notes: list[str]
    files: list[LaunchFile]


def _files_text(result: LaunchResult, console: Console) -> None:
    # Byte for byte: rich would expand tabs, and a config file is not for rich to touch.
    for text in result.files.values():
        console.file.write(text)


def _launch_document(result: LaunchResult) -> dict[str, Any]:
    plan = result.plan
    document = LaunchDocument(
        recipe=plan.recipe,
        vllm_version=plan.vllm_version,
        target=result.target,
        release_note=result.release_note,
        warnings=list(plan.warnings),
        notes=list(plan.notes),
        files=[LaunchFile(name=name, content=text) for name, text in result.files.items()],
    )
    data: dict[str, Any] = document.model_dump(mode="json")
    return data


LAUNCH: ReportKind[LaunchResult] = ReportKind(
    name="launch",
    title="kvtool launch JSON document",
    schema_version=1,
    text=_files_text,
    document=_launch_document,
    schema=lambda: LaunchDocument.model_json_schema(mode="serialization"),
)


def _list_text(summaries: list[RecipeSummary], console: Console) -> None:
    console.print("kvtool launch recipes (step: the field guide's decision tree)\n")
    for s in summaries:
        step = f"step {s.decision}" if s.decision else "outside the tree"
        console.print(
            f"[bold]{escape(s.name)}[/bold]  ({step}; vLLM {s.supported}; "
            f"targets {', '.join(s.targets)})",
            soft_wrap=True,
        )
        console.print(f"  {s.title}", markup=False, soft_wrap=True)
        console.print(f"  Pick it when: {s.when}\n", markup=False, soft_wrap=True)


class _RecipeList(BaseModel):
    recipes: list[RecipeSummary]


LAUNCH_LIST: ReportKind[list[RecipeSummary]] = ReportKind(
    name="launch-list",
    title="kvtool launch --list JSON document",
    schema_version=1,
    text=_list_text,
    document=lambda summaries: {"recipes": [asdict(s) for s in summaries]},
    schema=lambda: _RecipeList.model_json_schema(mode="serialization"),
)
