"""--fix changes only the bytes of its edits, writes atomically and never loses a file.

Each case writes a serve script in one byte-level shape (CRLF, a lone CR inside a
quoted value, a BOM, no final newline, tabs), runs ``--fix`` and compares the result
with the original less exactly the lines the two safe fixes remove, computed here on
the raw bytes. ``--diff`` must be a patch that ``patch`` applies to the same result.
"""

from __future__ import annotations

import os
import resource
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

# Two safe fixes for vLLM 0.32.0 (VG002 drops --calculate-kv-scales, CN010 drops
# --disable-hybrid-kv-cache-manager); each flag sits alone on a continued line.
FIXED_FLAGS = ("--calculate-kv-scales", "--disable-hybrid-kv-cache-manager")
LINES = [
    "#!/bin/sh",
    "# a comment with a tab\there",
    "vllm serve meta-llama/Llama-3.1-8B-Instruct \\",
    "  --kv-offloading-size 100 \\",
    "  --calculate-kv-scales \\",
    "\t--disable-hybrid-kv-cache-manager \\",
    "  --port 8000",
]
VERSION = ("--vllm-version", "0.32.0")
KVTOOL_MAIN = "from kvtool.cli import main; main()"


def _script(newline: str = "\n", *, final: bool = True, bom: bool = False) -> bytes:
    text = newline.join(LINES) + (newline if final else "")
    return (("\ufeff" if bom else "") + text).encode("utf-8")


def _expected(original: bytes) -> bytes:
    """The original less every raw line holding a fixed flag (its line ending with it)."""
    kept = [
        line
        for line in original.splitlines(keepends=True)
        if not any(flag.encode() in line for flag in FIXED_FLAGS)
    ]
    return b"".join(kept)


CASES = {
    "lf": _script(),
    "crlf": _script("\r\n"),
    "no-final-newline": _script(final=False),
    "crlf-no-final-newline": _script("\r\n", final=False),
    "bom": _script(bom=True),
    # A lone CR inside a quoted value is data, not a line break: it must stay a CR.
    "lone-cr-in-value": _script().replace(
        b"--port 8000", b"--port 8000 --served-model-name 'a\rb'"
    ),
}


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("case", sorted(CASES))
def test_fix_changes_only_the_bytes_of_its_edits(kvtool_cli, workdir: Path, case: str) -> None:
    original = CASES[case]
    script = workdir / "serve.sh"
    script.write_bytes(original)
    script.chmod(0o750)
    diff = kvtool_cli("audit", "serve.sh", *VERSION, "--diff")
    assert script.read_bytes() == original
    result = kvtool_cli("audit", "serve.sh", *VERSION, "--fix")
    assert "Applied 2 fix(es)." in result.stderr, result.stderr
    assert script.read_bytes() == _expected(original)
    assert stat.S_IMODE(script.stat().st_mode) == 0o750
    assert sorted(p.name for p in workdir.iterdir()) == ["serve.sh"]  # no temporary left
    # The --diff output is a valid patch that yields exactly the fixed bytes.
    copy = workdir / "patched"
    copy.mkdir()
    (copy / "serve.sh").write_bytes(original)
    subprocess.run(
        ["patch", "-p1", "--quiet"], input=diff.stdout.encode(), cwd=copy, check=True
    )
    assert (copy / "serve.sh").read_bytes() == _expected(original)


def test_fix_through_a_symlink_keeps_the_link(kvtool_cli, workdir: Path) -> None:
    (workdir / "real.sh").write_bytes(CASES["lf"])
    (workdir / "serve.sh").symlink_to("real.sh")
    kvtool_cli("audit", "serve.sh", *VERSION, "--fix")
    assert (workdir / "serve.sh").is_symlink()
    assert (workdir / "real.sh").read_bytes() == _expected(CASES["lf"])


def test_fix_leaves_hard_linked_and_read_only_files_alone(kvtool_cli, workdir: Path) -> None:
    linked = workdir / "serve.sh"
    linked.write_bytes(CASES["lf"])
    os.link(linked, workdir / "other-name.sh")
    result = kvtool_cli("audit", "serve.sh", *VERSION, "--fix")
    assert result.exit_code == 2 and "hard links" in result.stderr
    assert linked.read_bytes() == CASES["lf"] and linked.stat().st_nlink == 2
    read_only = workdir / "ro.sh"
    read_only.write_bytes(CASES["lf"])
    read_only.chmod(0o444)
    result = kvtool_cli("audit", "ro.sh", *VERSION, "--fix")
    assert result.exit_code == 2 and "read-only" in result.stderr
    assert read_only.read_bytes() == CASES["lf"]


def test_an_edit_made_during_the_run_is_not_lost(
    kvtool_cli, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import kvtool.audit.fix_plan as fixing

    script = workdir / "serve.sh"
    script.write_bytes(CASES["lf"])
    edited = CASES["lf"] + b"# another editor saved this line\n"
    real_fix_text = fixing.fix_text

    def fix_while_someone_saves(*args, **kwargs):  # type: ignore[no-untyped-def]
        script.write_bytes(edited)  # the other editor saves between kvtool's read and write
        return real_fix_text(*args, **kwargs)

    monkeypatch.setattr(fixing, "fix_text", fix_while_someone_saves)
    result = kvtool_cli("audit", "serve.sh", *VERSION, "--fix")
    assert result.exit_code == 2 and "changed on disk" in result.stderr
    assert script.read_bytes() == edited


def test_a_file_size_limit_leaves_the_script_whole(workdir: Path) -> None:
    """ENOSPC/EFBIG while writing: the original stays byte for byte, exit 2, no traceback."""
    padding = b"# " + b"x" * 4000 + b"\n"
    original = padding + CASES["lf"]
    script = workdir / "serve.sh"
    script.write_bytes(original)
    limit = 1024  # smaller than the fixed file, so writing the temporary file fails

    def cap_file_size() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    result = subprocess.run(
        [sys.executable, "-c", KVTOOL_MAIN, "audit", "serve.sh", *VERSION, "--fix"],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        preexec_fn=cap_file_size,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and "left as it was" in result.stderr
    assert script.read_bytes() == original
    assert sorted(p.name for p in workdir.iterdir()) == ["serve.sh"]


def test_report_never_replaces_an_input(kvtool_cli, workdir: Path) -> None:
    script = workdir / "serve.sh"
    script.write_bytes(CASES["lf"])
    (workdir / "alias.sh").symlink_to("serve.sh")
    for target in ("serve.sh", "./serve.sh", "alias.sh"):
        result = kvtool_cli("audit", "serve.sh", *VERSION, "-o", target)
        assert result.exit_code == 2 and "is an input" in result.stderr
        assert script.read_bytes() == CASES["lf"]
    result = kvtool_cli("audit", "serve.sh", *VERSION, "-o", "report.txt")
    assert "--calculate-kv-scales" in (workdir / "report.txt").read_text()
