"""The comment block every text target starts with: what the file is and what to mind."""

from __future__ import annotations

from kvtool.launch.plan import LaunchPlan
from kvtool.launch.targets.names import comment_text


def header_lines(plan: LaunchPlan, generated_by: str) -> list[str]:
    """``# ``-comment lines: title, release/model/TP, ``generated_by``, notes, warnings.

    Warnings (security floor, sizing) are repeated here so they travel with the file.
    Every line is one comment line whatever the values hold (see ``comment_text``).
    """
    lines = [
        plan.title,
        f"vLLM {plan.vllm_version}, model {plan.model}, TP {plan.tp}.",
        generated_by,
        *(f"Note: {note}" for note in plan.notes),
        *(f"Warning: {warning}" for warning in plan.warnings),
    ]
    return [f"# {comment_text(line)}" for line in lines]
