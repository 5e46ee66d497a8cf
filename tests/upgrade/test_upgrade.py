"""``kvtool upgrade``: one test per change class, on the shipped examples and on fixtures.

Every release a test expects something at (a flag's removal, a default's change, a bug's
range) is looked up in the tables or curated rows the command reads, never typed in.
Fixture scripts are ``vllm serve`` command lines in the shape vLLM documents
(https://docs.vllm.ai/en/latest/cli/serve/ : ``vllm serve MODEL --flag value ...``).
"""

from __future__ import annotations

import itertools
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from packaging.version import Version

from kvtool.audit.inputs import read_inputs
from kvtool.audit.settings import AuditSettings
from kvtool.bugdb import records
from kvtool.releases import (
    available_versions,
    load_release,
    release_index,
    security_floor,
    semantic_facts,
)
from kvtool.upgrade.plan import InvocationUpgrade, Planner, StepChange, retag
from tests.conftest import REPO_ROOT, CliResult

EXAMPLES = REPO_ROOT / "examples"
Cli = Callable[..., CliResult]


def _plan(path: Path, to: str, current: str | None) -> InvocationUpgrade:
    (invocation,) = read_inputs([path])
    return Planner(AuditSettings(), to, current).plan(invocation)


def _script(tmp_path: Path, *lines: str, env: tuple[str, ...] = ()) -> Path:
    path = tmp_path / "serve.sh"
    exports = "".join(f"export {e}\n" for e in env)
    body = " \\\n  ".join(("vllm serve Qwen/Qwen3-0.6B", *lines))
    path.write_text(f"#!/bin/sh\n{exports}{body}\n", encoding="utf-8")
    return path


def _changes(plan: InvocationUpgrade, version: str) -> list[StepChange]:
    return [c for s in plan.steps if s.version == version for c in s.changes]


def _before(version: str) -> str:
    versions = available_versions()
    return versions[versions.index(version) - 1]


def _errors(result: CliResult) -> set[tuple[str, str | None]]:
    findings = json.loads(result.stdout)["findings"]
    return {(f["code"], f["flag"]) for f in findings if f["severity"] == "error"}


def test_removed_flag_breaks_and_fix_passes_the_audit_at_the_target(
    kvtool_cli: Cli, tmp_path: Path
) -> None:
    # The example carries a flag that is gone by 0.32.0 (its own comments say so).
    script = tmp_path / "lmcache-tp4.sh"
    shutil.copy(EXAMPLES / "lmcache-tp4.sh", script)
    plan = _plan(script, "0.32.0", "0.22.0")
    assert plan.breaks
    removed = next(f for f in plan.entered if f.code == "VG002")
    gate = release_index().flags[removed.flag or ""]
    assert gate.gone_at and Version("0.22.0") < Version(gate.gone_at) <= Version("0.32.0")
    assert any(c.code == "VG002" and c.fix for c in _changes(plan, gate.gone_at))
    result = kvtool_cli("upgrade", str(script), "--from", "0.22.0", "--to", "0.32.0")
    assert result.exit_code == 1
    fixed = kvtool_cli("upgrade", str(script), "--from", "0.22.0", "--to", "0.32.0", "--fix")
    assert fixed.exit_code == 0, fixed.stdout
    assert removed.flag and removed.flag not in script.read_text()
    audit = kvtool_cli("audit", str(script), "--vllm-version", "0.32.0")
    assert audit.exit_code == 0, audit.stdout


def test_image_tag_is_the_current_release_and_fix_retags_it(
    kvtool_cli: Cli, tmp_path: Path
) -> None:
    compose = tmp_path / "compose.yaml"
    shutil.copy(EXAMPLES / "compose.yaml", compose)
    newest = available_versions()[-1]
    plan = _plan(compose, newest, None)
    assert plan.current.source == "image" and plan.image
    before = kvtool_cli("audit", str(compose), "--output-format", "json")
    assert plan.new_image == retag(plan.image, newest) and newest in (plan.new_image or "")
    result = kvtool_cli("upgrade", str(compose), "--to", newest, "--fix")
    text = compose.read_text()
    assert plan.new_image and plan.new_image in text and plan.image not in text
    # With the tag moved, the audit's own target is the new release.
    # With the tag moved, the audit's own target is the new release, and the only errors
    # left are those the file already had at its old release (none the upgrade brought).
    audit = kvtool_cli("audit", str(compose), "--output-format", "json")
    assert json.loads(audit.stdout)["target"]["vllm_version"] == newest
    assert _errors(audit) <= _errors(before)
    # The upgrade's verdict after --fix is the audit's at the target: while an error
    # remains (one the file had before, or one whose fix could not be applied) it exits 1.
    assert result.exit_code == (1 if _errors(audit) else 0), result.stdout + result.stderr


def test_retag_keeps_the_tag_suffix() -> None:
    assert retag("vllm/vllm-openai:v0.30.0-cu129", "0.32.0") == "vllm/vllm-openai:v0.32.0-cu129"
    assert retag("registry.local:5000/vllm:0.31.0", "0.32.0") == "registry.local:5000/vllm:0.32.0"
    assert retag("vllm/vllm-openai:latest", "0.32.0") is None


def test_removed_env_var_is_reported_with_its_replacement(tmp_path: Path) -> None:
    name, gate = next(
        (n, g)
        for n, g in sorted(release_index().env_vars.items())
        if g.gone_at and g.replacement and Version(g.first_seen) < Version(_before(g.gone_at))
    )
    path = _script(tmp_path, "--max-model-len 4096", env=(f"{name}=1",))
    plan = _plan(path, gate.gone_at or "", _before(gate.gone_at or ""))
    (change,) = [c for c in _changes(plan, gate.gone_at or "") if c.code == "VG011"]
    assert change.subject == name and change.location and change.location.line == 2
    assert (gate.replacement or "") in change.message


def test_fix_turns_a_removed_env_var_into_its_replacement_flag(
    kvtool_cli: Cli, tmp_path: Path
) -> None:
    name, gate, target_flag = next(
        (n, g, f)
        for n, g in sorted(release_index().env_vars.items())
        if g.gone_at and (g.replacement or "").startswith("--")
        for f in load_release(g.gone_at).flags
        if f.name == g.replacement and f.value == "required"
    )
    gone_at, flag = gate.gone_at or "", gate.replacement or ""
    value = target_flag.choices[-1] if target_flag.choices else "64"
    path = _script(tmp_path, "--max-model-len 4096", env=(f"{name}={value}",))
    result = kvtool_cli("upgrade", str(path), "--from", _before(gone_at), "--to", gone_at, "--fix")
    assert result.exit_code == 0, result.stderr
    text = path.read_text()
    assert f"{flag} {value}" in text and name not in text
    audit = kvtool_cli("audit", str(path), "--vllm-version", gone_at, "--output-format", "json")
    assert audit.exit_code == 0 and json.loads(audit.stdout)["findings"] == []


def test_removed_connector_breaks_the_invocation_using_it(tmp_path: Path) -> None:
    name, gate = next((n, g) for n, g in sorted(release_index().connectors.items()) if g.gone_at)
    config = json.dumps({"kv_connector": name, "kv_role": "kv_both"})
    path = _script(tmp_path, f"--kv-transfer-config '{config}'")
    plan = _plan(path, gate.gone_at or "", _before(gate.gone_at or ""))
    assert plan.breaks and any(f.code == "VG021" for f in plan.entered)
    connectors = [c for c in _changes(plan, gate.gone_at or "") if c.kind == "connector"]
    assert any(c.subject == name and "uses it" in c.message and c.touches for c in connectors)
    # Other connectors changing in the same release are listed but do not touch it.
    assert all(c.touches == (c.subject == name) for c in connectors)


def test_fix_without_a_safe_fix_still_breaks(kvtool_cli: Cli, tmp_path: Path) -> None:
    name, gate = next((n, g) for n, g in sorted(release_index().connectors.items()) if g.gone_at)
    config = json.dumps({"kv_connector": name, "kv_role": "kv_both"})
    path = _script(tmp_path, f"--kv-transfer-config '{config}'")
    before = path.read_text()
    result = kvtool_cli(
        "upgrade",
        str(path),
        "--from",
        _before(gate.gone_at or ""),
        "--to",
        gate.gone_at or "",
        "--fix",
    )
    assert result.exit_code == 1 and "still does not start" in result.stderr
    assert path.read_text() == before  # a connector swap is not a safe fix


def test_supports_hma_change_of_a_connector_is_a_step(tmp_path: Path) -> None:
    versions = available_versions()
    older, newer, name = next(
        (a, b, c.name)
        for a, b in itertools.pairwise(versions)
        for c in load_release(b).connectors
        if any(
            o.name == c.name and o.supports_hma != c.supports_hma
            for o in load_release(a).connectors
        )
    )
    path = _script(tmp_path, "--max-model-len 4096")
    plan = _plan(path, newer, older)
    assert any(c.subject == name and "SupportsHMA" in c.message for c in _changes(plan, newer))


def test_default_change_of_an_unset_flag_is_a_step(tmp_path: Path) -> None:
    older, newer, flag = next(
        (a, b, f.name)
        for a, b in itertools.pairwise(available_versions())
        for f in load_release(b).flags
        if any(o.name == f.name and o.default != f.default for o in load_release(a).flags)
    )
    path = _script(tmp_path, "--max-model-len 4096")
    plan = _plan(path, newer, older)
    assert any(c.kind == "default" and c.subject == flag for c in _changes(plan, newer))
    # Set on the command line, the default does not matter.
    written = _script(tmp_path, f"{flag} 1" if flag != "--max-model-len" else "--seed 1")
    again = _plan(written, newer, older)
    assert not any(c.kind == "default" and c.subject == flag for c in _changes(again, newer))


def test_hma_decision_change_is_a_behaviour_step(tmp_path: Path) -> None:
    boundary = next(r.since for r in semantic_facts() if r.key == "hma.decision" and r.since)
    assert boundary is not None
    plan = _plan(_script(tmp_path, "--max-model-len 4096"), boundary, _before(boundary))
    assert any(
        c.kind == "behaviour" and c.subject == "hma.decision" for c in plan.steps[-1].changes
    )


def test_security_floor_crossed(tmp_path: Path) -> None:
    oldest = Version(available_versions()[0])
    advisory = next(
        a
        for a in security_floor()
        if a.fixed and (a.introduced is None or Version(a.introduced) <= oldest)
    )
    fixed = advisory.fixed or ""
    plan = _plan(_script(tmp_path, "--max-model-len 4096"), fixed, _before(fixed))
    assert any(
        c.kind == "security" and c.subject == advisory.id and "fixed" in c.message
        for c in _changes(plan, fixed)
    )


def test_known_bug_entered_and_left(tmp_path: Path) -> None:
    bug = next(
        b
        for b in records()
        if b.component == "vllm"
        and b.introduced
        and b.fixed
        and b.trigger.env
        and not (
            b.trigger.flags
            or b.trigger.connectors
            or b.trigger.needs_model
            or b.trigger.offload
            or b.trigger.values
        )
    )
    env = tuple(f"{k}={v}" for k, v in bug.trigger.env.items())
    path = _script(tmp_path, "--max-model-len 4096", env=env)
    plan = _plan(path, bug.fixed or "", _before(bug.introduced or ""))
    entered = _changes(plan, bug.introduced or "")
    left = _changes(plan, bug.fixed or "")
    assert any(c.kind == "finding-entered" and c.code == "SC002" for c in entered)
    assert any(c.kind == "finding-left" and c.code == "SC002" for c in left)


def test_settings_name_the_current_release(
    kvtool_cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = tmp_path / "lmcache-tp4.sh"
    shutil.copy(EXAMPLES / "lmcache-tp4.sh", script)
    (tmp_path / "kvtool.toml").write_text('vllm-version = "0.22.0"\n', encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    result = kvtool_cli("upgrade", str(script), "--to", "0.32.0", "--output-format", "json")
    (invocation,) = json.loads(result.stdout)["invocations"]
    assert invocation["current"]["source"] == "settings"
    assert invocation["current"]["vllm_version"] == "0.22.0"


def test_every_example_plans_to_the_newest_release(kvtool_cli: Cli) -> None:
    newest = available_versions()[-1]
    oldest_image_free = "0.22.0"  # the shell examples name no image: say where they run now
    for path in sorted(EXAMPLES.iterdir()):
        result = kvtool_cli(
            "upgrade",
            str(path),
            "--from",
            oldest_image_free,
            "--to",
            newest,
            "--output-format",
            "json",
        )
        assert result.exit_code in (0, 1), (path, result.stderr)
        document = json.loads(result.stdout)
        assert document["schema_version"] == 1 and document["to_version"] == newest
        assert document["breaks"] == (result.exit_code == 1)


def test_sarif_carries_the_entered_findings(kvtool_cli: Cli) -> None:
    result = kvtool_cli(
        "upgrade",
        str(EXAMPLES / "lmcache-tp4.sh"),
        "--from",
        "0.22.0",
        "--to",
        "0.32.0",
        "--output-format",
        "sarif",
    )
    document = json.loads(result.stdout)
    assert document["version"] == "2.1.0"
    assert "VG002" in {r["ruleId"] for r in document["runs"][0]["results"]}


@pytest.mark.parametrize(
    "args",
    [
        ("--to", "0.1.0"),  # older than every table
        ("--to", "0.22.0", "--from", "0.32.0"),  # not an upgrade
        ("--to", "0.32.0"),  # the script names no release it runs now
    ],
)
def test_bad_input_exits_2(kvtool_cli: Cli, args: tuple[str, ...]) -> None:
    result = kvtool_cli("upgrade", str(EXAMPLES / "lmcache-tp4.sh"), *args)
    assert result.exit_code == 2 and "kvtool: error:" in result.stderr
