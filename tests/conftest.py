"""Shared test helpers."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent


@dataclass
class CliResult:
    exit_code: int
    stdout: str
    stderr: str


@pytest.fixture
def kvtool_cli(capsys: pytest.CaptureFixture[str]):  # type: ignore[no-untyped-def]
    """Run the kvtool CLI in-process: ``kvtool_cli("audit", "x.sh")`` -> CliResult."""
    from kvtool.cli import run

    def invoke(*args: str) -> CliResult:
        capsys.readouterr()
        code = run(list(args))
        captured = capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    return invoke
