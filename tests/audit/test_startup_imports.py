"""``kvtool audit`` imports only what the input needs: no heavy library (httpx, docker,
torch, numpy), no validation library (pydantic) on any shipped example, no PyYAML for a
shell script, and no other input kind's reader than those the file's own reader imports.

The reader modules come from the input registry, never listed here.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT

HEAVY = ("httpx", "docker", "torch", "numpy", "pydantic")
PROGRAM = """
import contextlib, io, json, sys
from kvtool.cli import run
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    run(["audit", *sys.argv[1:], "--exit-zero"])
print(json.dumps(sorted(sys.modules)))
"""
READER_MODULES = """
import importlib, json, sys
importlib.import_module("kvtool.audit.inputs." + sys.argv[1])
print(json.dumps(sorted(m for m in sys.modules)))
"""


def _modules(program: str, *args: str) -> set[str]:
    result = subprocess.run(
        [sys.executable, "-c", program, *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return set(json.loads(result.stdout.splitlines()[-1]))


def _reader_modules() -> dict[str, str]:
    from kvtool.audit.inputs.registry import READERS

    return {f"kvtool.audit.inputs.{r.module}": r.kind for r in READERS}


@pytest.mark.parametrize(
    ("example", "reader", "forbidden"),
    [
        ("examples/lmcache-tp4.sh", "shell", (*HEAVY, "yaml")),
        ("examples/k8s-deployment.yaml", "kubernetes", HEAVY),
        ("examples/compose.yaml", "compose", HEAVY),
    ],
)
def test_audit_imports_only_what_the_input_needs(
    example: str, reader: str, forbidden: tuple[str, ...]
) -> None:
    loaded = _modules(PROGRAM, example)
    tops = {name.split(".")[0] for name in loaded}
    assert not tops & set(forbidden), f"audit {example} imported {sorted(tops & set(forbidden))}"
    own = _modules(READER_MODULES, reader)
    other_readers = {m for m in _reader_modules() if m in loaded and m not in own}
    assert not other_readers, f"audit {example} imported other readers: {sorted(other_readers)}"
