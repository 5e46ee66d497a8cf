"""Every bug record, audited from its own example invocations through the real CLI.

Each record carries examples (``rules/bugs/*.toml``): invocations in the shape the
thread used, written for kvtool, that must fire (inside the range) or stay quiet (the
avoidance applied, a neighbouring config). From each firing example the test derives
the releases just outside the range (the fixed release, the release before
``introduced``) and asserts the record is quiet there too.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from packaging.version import Version

from kvtool.bugdb import BugRecord, Example, records
from kvtool.lmcache import releases as lmcache_releases
from kvtool.releases import release_index

CASES = [(bug, example) for bug in records() for example in bug.examples]


def _script(example: Example, tmp_path: Path) -> Path:
    env = " ".join(f"{k}={v}" for k, v in sorted(example.env.items()))
    path = tmp_path / "serve.sh"
    path.write_text(f"#!/bin/sh\n{env + ' ' if env else ''}{example.command}\n")
    return path


def fired(
    kvtool_cli: Any, tmp_path: Path, example: Example, version: str, lmcache: str | None
) -> list[dict[str, Any]]:
    args = [
        "audit",
        str(_script(example, tmp_path)),
        "--vllm-version",
        version,
        "--select",
        "SC002",
        "--output-format",
        "json",
    ]
    if lmcache is not None:
        args += ["--lmcache-version", lmcache]
    result = kvtool_cli(*args)
    assert result.exit_code in (0, 1), result.stderr
    found: list[dict[str, Any]] = json.loads(result.stdout)["findings"]
    return found


def _ids(findings: list[dict[str, Any]]) -> list[str]:
    return [f["evidence"]["record"] for f in findings]


def _outside(bug: BugRecord) -> list[str]:
    """Releases of the bug's component just outside its range (tabled ones only)."""
    known = (
        list(release_index().versions)
        if bug.component == "vllm"
        else [r.version for r in lmcache_releases()]
    )
    out = []
    if bug.fixed is not None and bug.fixed in known:
        out.append(bug.fixed)
    if bug.introduced is not None:
        older = [v for v in known if Version(v) < Version(bug.introduced)]
        if older:
            out.append(max(older, key=Version))
    return out


@pytest.mark.parametrize(
    ("bug", "example"), CASES, ids=[f"{b.id}-{i}" for b, e in CASES for i in [b.examples.index(e)]]
)
def test_example(kvtool_cli: Any, tmp_path: Path, bug: BugRecord, example: Example) -> None:
    found = fired(kvtool_cli, tmp_path, example, example.version, example.lmcache)
    assert (bug.id in _ids(found)) is example.fires, example.note or example.command
    if not example.fires:
        return
    finding = next(f for f in found if f["evidence"]["record"] == bug.id)
    assert finding["evidence"]["report"] == bug.report
    assert finding["evidence"]["fix_url"] == bug.fix
    for release in _outside(bug):
        version, lmcache = (
            (release, example.lmcache) if bug.component == "vllm" else (example.version, release)
        )
        quiet = fired(kvtool_cli, tmp_path, example, version, lmcache)
        assert bug.id not in _ids(quiet), f"fires at {bug.component} {release}, outside the range"
