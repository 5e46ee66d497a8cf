"""``kvtool upgrade`` tells the truth: an invocation that does not start at ``--to`` is never
reported as starting, whichever release its errors entered at, and ``--diff`` shows exactly
the bytes ``--fix`` writes.

Flags, env vars and releases are looked up in the release index, never typed in; the
scripts are ``vllm serve`` command lines in the shape vLLM documents
(https://docs.vllm.ai/en/latest/cli/serve/).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

from kvtool.releases import available_versions, load_release, release_index
from tests.conftest import CliResult
from tests.release_facts import removed_value_flags

Cli = Callable[..., CliResult]


def _script(tmp_path: Path, flags: list[str], env: tuple[str, ...] = ()) -> Path:
    path = tmp_path / "serve.sh"
    exports = "".join(f"export {e}\n" for e in env)
    words = " ".join(f"{flag} 4" for flag in flags)
    path.write_text(f"#!/bin/sh\n{exports}vllm serve Qwen/Qwen3-0.6B {words}\n", encoding="utf-8")
    return path


def test_errors_already_there_at_from_still_fail_the_upgrade(
    kvtool_cli: Cli, tmp_path: Path
) -> None:
    versions = available_versions()
    newest, start = versions[-1], versions[-4]
    removed = removed_value_flags(start)[:2]
    assert len(removed) == 2
    script = _script(tmp_path, removed)
    plan = kvtool_cli(
        "upgrade", str(script), "--from", start, "--to", newest, "--output-format", "json"
    )
    assert plan.exit_code == 1, plan.stdout
    (inv,) = json.loads(plan.stdout)["invocations"]
    assert inv["breaks"] is True
    assert {f["flag"] for f in inv["at_target"] if f["severity"] == "error"} >= set(removed)
    assert {f["flag"] for f in inv["broken_now"]} >= set(removed)
    text = kvtool_cli("upgrade", str(script), "--from", start, "--to", newest)
    assert "starts as written" not in text.stdout
    assert all(flag in text.stdout for flag in removed)
    # The audit at the target agrees with the upgrade's verdict.
    audit = kvtool_cli("audit", str(script), "--vllm-version", newest)
    assert audit.exit_code == 1
    fixed = kvtool_cli("upgrade", str(script), "--from", start, "--to", newest, "--fix")
    after = kvtool_cli("audit", str(script), "--vllm-version", newest)
    assert fixed.exit_code == after.exit_code == 0, fixed.stderr + after.stdout
    assert not any(flag in script.read_text() for flag in removed)


def test_an_error_fix_cannot_remove_keeps_exit_1_after_fix(kvtool_cli: Cli, tmp_path: Path) -> None:
    versions = available_versions()
    newest, start = versions[-1], versions[-3]
    name = removed_value_flags(start)[0]
    script = _script(tmp_path, [name])
    script.chmod(0o444)  # the fix cannot be written: the error stays
    result = kvtool_cli("upgrade", str(script), "--from", start, "--to", newest, "--fix")
    assert result.exit_code != 0
    assert name in script.read_text()


def _env_migration() -> tuple[str, str, str]:
    """An env var the index replaces with a flag, the release it went, and the flag."""
    index = release_index()
    for name, gate in sorted(index.env_vars.items()):
        if not (gate.gone_at and gate.replacement and gate.replacement.startswith("--")):
            continue
        fact = next(f for f in load_release(gate.gone_at).flags if f.name == gate.replacement)
        if fact.choices is None and fact.value == "required":
            return name, gate.gone_at, gate.replacement
    raise AssertionError("the release index names no env var replaced by a flag")


def test_diff_shows_exactly_what_fix_writes(kvtool_cli: Cli, tmp_path: Path) -> None:
    env, gone_at, flag = _env_migration()
    versions = available_versions()
    start = versions[versions.index(gone_at) - 1]
    script = _script(tmp_path, [], env=(f"{env}=64",))
    original = script.read_text()
    preview = kvtool_cli("upgrade", str(script), "--from", start, "--to", versions[-1], "--diff")
    assert script.read_text() == original  # --diff writes nothing
    written = kvtool_cli("upgrade", str(script), "--from", start, "--to", versions[-1], "--fix")
    assert written.exit_code in (0, 1), written.stderr
    result = script.read_text()
    assert result != original and flag in result and env not in result
    # The preview, applied to the original with patch(1), gives the written file byte for byte.
    copy = tmp_path / "copy" / "serve.sh"
    copy.parent.mkdir()
    copy.write_text(original, encoding="utf-8")
    patch = preview.stdout.replace(str(script), "serve.sh")
    subprocess.run(["patch", "-s", "-p0"], input=patch, text=True, cwd=copy.parent, check=True)
    assert copy.read_text() == result


def test_env_migration_and_a_fix_of_the_last_word_both_apply(tmp_path: Path) -> None:
    """Adding a flag after the command's last word never clashes with a fix of that word."""
    from kvtool.audit.edits import fix_text
    from kvtool.audit.inputs import read_inputs
    from kvtool.audit.model import Fix

    script = tmp_path / "serve.sh"
    script.write_text("vllm serve m --mode all\n", encoding="utf-8")
    (inv,) = read_inputs([script])
    last = inv.tokens[-1]
    outcome = fix_text(
        script.read_text(),
        [
            Fix(
                applicability="safe",
                description="append",
                remove_tokens=(last,),
                replacement=("--x", "1"),
                insert_after=True,
            ),
            Fix(
                applicability="safe",
                description="replace",
                remove_tokens=(last,),
                replacement=("align",),
            ),
        ],
        file=str(script),
        kind="shell",
        invocations=[inv],
    )
    assert outcome.skipped == ()
    assert outcome.text == "vllm serve m --mode align --x 1\n"
