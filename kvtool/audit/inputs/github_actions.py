"""GitHub Actions workflows: every ``run:`` step that starts a vLLM server.

Shape: ``jobs.<id>.steps[].run`` scripts with ``env:`` at workflow, job and step level
(https://docs.github.com/en/actions/writing-workflows/workflow-syntax-for-github-actions;
vllm-project/vllm and LMCache/LMCache CI workflows start ``vllm serve``,
``python -m vllm.entrypoints.openai.api_server`` and ``docker run vllm/vllm-openai``
in such steps). Each script is read by the shell reader with offsets mapped back into
the workflow, so a finding points at its line. A composite action (``action.yml`` with
``runs: {using: composite, steps: [...]}``,
https://docs.github.com/en/actions/sharing-automations/creating-actions/creating-a-composite-action;
e.g. a "Setup VLLM" action whose step runs ``docker run ... IMAGE --model ...``) is read
the same way, its steps' ``run:`` scripts with their ``env:``; ``${{ inputs.x }}`` is
a runtime value. A workflow that names neither vLLM nor
a known image is not parsed (the registry's prefilter). A ``${{ expression }}`` is a value only
known when the workflow runs: the shell reader keeps it as a dynamic word.
"""

from __future__ import annotations

import yaml

from kvtool.audit.inputs import yaml_tree
from kvtool.audit.inputs.positions import LineIndex
from kvtool.audit.inputs.shell import ShellContext, read_script
from kvtool.audit.inputs.source import ReadSource
from kvtool.audit.inputs.suppressions import yaml_comment_suppressions
from kvtool.audit.model import EnvAssignment, Invocation

_EXPRESSION = "${{"


def read(text: str, source: ReadSource) -> list[Invocation]:
    file = source.file
    comments = tuple(yaml_comment_suppressions(text, file))
    index = LineIndex(text, file)
    found: list[Invocation] = []
    for document in yaml_tree.compose_documents(text, file):
        workflow_env = _env(document, file)
        jobs = list(yaml_tree.items(yaml_tree.get(document, "jobs")))
        runs = yaml_tree.get(document, "runs")
        if runs is not None and yaml_tree.get(runs, "steps") is not None:
            name = yaml_tree.scalar(yaml_tree.get(document, "name")) or "composite action"
            jobs.append((name, runs, runs))
        for job_id, _, job in jobs:
            job_env = workflow_env + _env(job, file)
            for number, step in enumerate(yaml_tree.sequence(yaml_tree.get(job, "steps")), 1):
                run = yaml_tree.scalar_script(yaml_tree.get(step, "run"), text, index)
                if run is None:
                    continue
                script, locate = run
                step_name = yaml_tree.scalar(yaml_tree.get(step, "name")) or f"step {number}"
                context = ShellContext(
                    file=file,
                    kind="github-actions",
                    base_dir=source.base_dir,
                    env=job_env + _env(step, file),
                    label=f"{file or '<input>'}: job {job_id}, {step_name}",
                    suppressions=comments,
                )
                found.extend(read_script(script, locate, context))
    return found


def _env(node: yaml.Node | None, file: str | None) -> tuple[EnvAssignment, ...]:
    """An ``env:`` mapping; a value with a ``${{ }}`` expression is not known here."""
    found: list[EnvAssignment] = []
    for name, key, value_node in yaml_tree.items(yaml_tree.get(node, "env")):
        value = yaml_tree.scalar(value_node)
        known = value if value is not None and _EXPRESSION not in value else None
        found.append(EnvAssignment(name=name, value=known, location=yaml_tree.location(key, file)))
    return tuple(found)
