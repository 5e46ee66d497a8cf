"""``kvtool audit`` must not import heavy libraries (httpx, docker, torch, numpy)."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO_ROOT

HEAVY = ("httpx", "docker", "torch", "numpy")
PROGRAM = f"""
import contextlib, io, sys
from kvtool.cli import run
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    run(["audit", "examples/k8s-deployment.yaml", "examples/lmcache-tp4.sh", "--exit-zero"])
print(",".join(m for m in {HEAVY!r} if m in sys.modules))
"""


def test_audit_imports_no_heavy_library() -> None:
    result = subprocess.run(
        [sys.executable, "-c", PROGRAM], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "", f"audit imported {result.stdout.strip()}"
