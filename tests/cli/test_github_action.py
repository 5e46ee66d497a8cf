"""action.yml: valid GitHub Action metadata whose expressions name real inputs and
steps, and whose audit step, run as the runner would run it, writes a valid SARIF
report and reports kvtool's exit code."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tests.cli.action_metadata_schema import ACTION_SCHEMA
from tests.conftest import REPO_ROOT

ACTION = yaml.safe_load((REPO_ROOT / "action.yml").read_text(encoding="utf-8"))
SARIF_SCHEMA = json.loads((REPO_ROOT / "tests" / "data" / "sarif-schema-2.1.0.json").read_text())
EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")


def test_action_metadata_is_valid() -> None:
    jsonschema.Draft202012Validator(ACTION_SCHEMA).validate(ACTION)


def test_the_schema_check_can_fail() -> None:
    broken = {**ACTION, "runs": {"using": "composite", "steps": [{"run": "true"}]}}  # no shell
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator(ACTION_SCHEMA).validate(broken)


def test_expressions_name_declared_inputs_and_existing_steps() -> None:
    text = (REPO_ROOT / "action.yml").read_text(encoding="utf-8")
    step_ids = {step.get("id") for step in ACTION["runs"]["steps"]}
    for expression in EXPRESSION.findall(text):
        for name in re.findall(r"inputs\.([\w-]+)", expression):
            assert name in ACTION["inputs"], expression
        for step in re.findall(r"steps\.([\w-]+)\.", expression):
            assert step in step_ids, expression


def _audit_step() -> dict[str, Any]:
    return next(step for step in ACTION["runs"]["steps"] if step.get("id") == "audit")


def _run_audit_step(tmp_path: Path, **inputs: str) -> tuple[int, dict[str, str]]:
    """Run the audit step's script with bash as the runner would: its env expressions
    filled from the inputs (defaults first), kvtool on PATH, GITHUB_OUTPUT a file."""
    values = {name: spec.get("default", "") for name, spec in ACTION["inputs"].items()}
    values.update(inputs)
    step = _audit_step()
    env_block = {
        key: EXPRESSION.sub(lambda m: values[m.group(1).removeprefix("inputs.")], str(value))
        for key, value in step["env"].items()
    }
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "kvtool"
    shim.write_text(f'#!/bin/sh\nexec {sys.executable} -c "from kvtool.cli import main; main()" '
                    '"$@"\n')
    shim.chmod(0o755)
    output = tmp_path / "github_output"
    output.touch()
    env = {**os.environ, **env_block, "GITHUB_OUTPUT": str(output),
           "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    assert step["shell"] == "bash"
    done = subprocess.run(["bash", "-e", "-c", step["run"]], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    outputs = dict(line.split("=", 1) for line in output.read_text().splitlines() if line)
    return done.returncode, outputs


def test_audit_step_writes_sarif_and_passes_findings_on(tmp_path: Path) -> None:
    serve = tmp_path / "serve.sh"
    serve.write_text((REPO_ROOT / "examples" / "lmcache-tp4.sh").read_text())
    code, outputs = _run_audit_step(tmp_path, paths="serve.sh", **{"vllm-version": "0.32.0"})
    assert code == 0  # findings fail the later step, after the upload
    assert outputs["exit-code"] == "1"
    report = json.loads((tmp_path / outputs["sarif-file"]).read_text())
    jsonschema.Draft202012Validator(SARIF_SCHEMA).validate(report)
    assert report["runs"][0]["results"]


def test_audit_step_fails_on_bad_input(tmp_path: Path) -> None:
    code, outputs = _run_audit_step(tmp_path, paths="no-such-dir")
    assert code == 2 and outputs["exit-code"] == "2"
