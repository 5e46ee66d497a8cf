"""``kvtool upgrade --fix`` keeps every byte it does not edit and writes atomically, as
``audit --fix`` does: CRLF, a BOM, no final newline and a lone CR survive a retag and an
env-var migration; a read-only file or a file-size limit leaves the file as it was.

Release facts come from the tables the command reads (``release_index``), never typed in.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from kvtool.audit.inputs import read_inputs
from kvtool.audit.settings import AuditSettings
from kvtool.releases import available_versions, load_release, release_index
from kvtool.upgrade.plan import Planner
from tests.conftest import REPO_ROOT, CliResult

Cli = Callable[..., CliResult]


def _hostile_bytes(text: str) -> bytes:
    """``text`` with a BOM, CRLF line ends and no final newline."""
    return ("\ufeff" + text.rstrip("\n").replace("\n", "\r\n")).encode("utf-8")


def _retag_case(tmp_path: Path) -> tuple[Path, bytes, str, str]:
    newest, older = available_versions()[-1], available_versions()[-2]
    compose = tmp_path / "compose.yaml"
    # The shape of a compose service on vLLM's image (vllm-project/vllm, docs/deployment/
    # docker.md): nothing in it needs a fix, so the retag is the only edit.
    compose.write_bytes(
        _hostile_bytes(
            f"services:\n  vllm:\n    image: vllm/vllm-openai:v{older}\n"
            '    command: ["Qwen/Qwen3-0.6B", "--max-model-len", "4096"]\n'
            '    ports:\n      - "8000:8000"\n'
        )
    )
    (invocation,) = read_inputs([compose])
    plan = Planner(AuditSettings(), newest, None).plan(invocation)
    assert plan.image and plan.new_image and plan.image != plan.new_image
    return compose, compose.read_bytes(), plan.image, plan.new_image


def test_retag_changes_only_the_image_bytes(kvtool_cli: Cli, tmp_path: Path) -> None:
    compose, before, old, new = _retag_case(tmp_path)
    result = kvtool_cli("upgrade", str(compose), "--to", available_versions()[-1], "--fix")
    assert result.exit_code in (0, 1), result.stderr
    assert compose.read_bytes() == before.replace(old.encode(), new.encode())


def test_a_read_only_file_is_left_alone(kvtool_cli: Cli, tmp_path: Path) -> None:
    compose, before, _, _ = _retag_case(tmp_path)
    compose.chmod(0o444)
    result = kvtool_cli("upgrade", str(compose), "--to", available_versions()[-1], "--fix")
    assert result.exit_code == 2 and "read-only" in result.stderr, result.stderr
    assert compose.read_bytes() == before


def test_a_file_size_limit_leaves_the_file_whole(tmp_path: Path) -> None:
    compose, before, _, _ = _retag_case(tmp_path)
    limit = len(before) // 2  # the rewrite cannot fit; the original already exists

    def capped() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    done = subprocess.run(
        [sys.executable, "-c", "from kvtool.cli import main; main()", "upgrade", str(compose),
         "--to", available_versions()[-1], "--fix"],
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        capture_output=True, text=True, preexec_fn=capped, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert compose.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == [compose.name]  # no temporary left


def test_env_migration_keeps_line_ends_and_counts_lines_as_the_reader_does(
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
    versions = available_versions()
    before_release = versions[versions.index(gone_at) - 1]
    value = target_flag.choices[-1] if target_flag.choices else "64"
    # A form feed and a lone CR are data inside a line to the shell and to the readers,
    # but line breaks to str.splitlines: the env line must still be found by its number.
    script = tmp_path / "serve.sh"
    script.write_bytes(
        _hostile_bytes(
            "#!/bin/sh\n# page\x0cbreak and a lone \r inside\n"
            f"export {name}={value}\n"
            "vllm serve Qwen/Qwen3-0.6B --max-model-len 4096\n"
        )
    )
    result = kvtool_cli(
        "upgrade", str(script), "--from", before_release, "--to", gone_at, "--fix"
    )
    assert result.exit_code == 0, result.stdout + result.stderr
    after = script.read_bytes()
    assert after.startswith(b"\xef\xbb\xbf#!/bin/sh\r\n# page\x0cbreak and a lone \r inside\r\n")
    assert name.encode() not in after and f"{flag} {value}".encode() in after
    assert after.count(b"\n") == after.count(b"\r\n") == 2
