"""``kvtool audit`` imports only what the input needs: no heavy library (httpx, docker,
torch, numpy), no validation library (pydantic) on any shipped example, no PyYAML for a
shell script, no other input kind's reader than those the file's own reader imports, no
other command's CLI module, and nothing only a write, a chart or an emoji code needs.
Detection itself chooses a reader from the registry's data, importing none.

The reader modules come from the input registry and the command modules from the CLI's
own table, never listed here.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

# packaging: importing its version and specifier modules cost a cold start more than
# every version check kvtool makes; kvtool compares versions with kvtool.versions.
HEAVY = ("httpx", "docker", "torch", "numpy", "pydantic", "packaging")
# What a read-only audit of a file outside any Helm chart never uses: a temporary file
# (only a write makes one), a cryptographic hash, the Helm renderer (only a file under a
# chart's templates/ is rendered) and rich's emoji table (kvtool prints no :name: codes).
UNUSED_BY_A_READ = ("tempfile", "hashlib", "kvtool.audit.inputs.helm_render", "rich._emoji_codes")
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
DETECT_ONLY = """
import json, os, sys
from kvtool.audit.inputs.registry import detect_kind
before = set(sys.modules)
kinds = {}
for path in sys.argv[1:]:
    with open(path, encoding="utf-8") as handle:
        kinds[path] = detect_kind(handle.read(), os.path.basename(path))
print(json.dumps({"kinds": kinds, "imported": sorted(set(sys.modules) - before)}))
"""


def _run(program: str, *args: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", program, *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return result.stdout.splitlines()[-1]


def _modules(program: str, *args: str) -> set[str]:
    return set(json.loads(_run(program, *args)))


def _reader_modules() -> dict[str, str]:
    from kvtool.audit.inputs.registry import READERS

    return {f"kvtool.audit.inputs.{r.module}": r.kind for r in READERS}


def _other_command_modules(command: str) -> set[str]:
    from kvtool.cli import COMMAND_MODULES

    return {module for name, module in COMMAND_MODULES.items() if name != command}


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
    other_commands = _other_command_modules("audit") & loaded
    assert not other_commands, f"audit {example} imported other commands: {other_commands}"
    unused = set(UNUSED_BY_A_READ) & loaded
    assert not unused, f"audit {example} imported what a read never uses: {sorted(unused)}"


def test_detection_chooses_a_reader_without_importing_one() -> None:
    """Every shipped example's kind is told from the registry's data: no reader module
    is imported, but the few a claim's ``confirm`` names (and only once its patterns hold)."""
    from kvtool.audit.inputs.registry import READERS

    examples = sorted(str(p) for p in Path(REPO_ROOT, "examples").iterdir() if p.is_file())
    found = json.loads(_run(DETECT_ONLY, *examples))
    assert any(kind is not None for kind in found["kinds"].values())
    confirmers = {
        f"kvtool.audit.inputs.{claim.confirm.partition(':')[0]}"
        for reader in READERS
        for claim in reader.detect
        if claim.confirm is not None
    }
    imported_readers = set(_reader_modules()) & set(found["imported"])
    assert imported_readers <= confirmers, sorted(imported_readers - confirmers)
