"""Every bug record, audited from its own example invocations through the real CLI.

Each record carries examples (``rules/bugs/*.toml``): invocations in the shape the
thread used, written for kvtool, that must fire (inside the range) or stay quiet (the
avoidance applied, a neighbouring config). From each firing example the test derives
the releases just outside the range (the fixed release, the release before
``introduced``) and asserts the record is quiet there too.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.version import Version

from kvtool.bugdb import BugRecord, Example, proofs, records
from kvtool.lmcache import releases as lmcache_releases
from kvtool.releases import release_index

CASES = [(bug, example) for bug in records() for example in bug.examples]


def _script(example: Example, tmp_path: Path) -> Path:
    if example.image is not None or example.pod_mates:
        return _deployment(example, tmp_path)
    env = " ".join(f"{k}={v}" for k, v in sorted(example.env.items()))
    path = tmp_path / "serve.sh"
    path.write_text(f"#!/bin/sh\n{env + ' ' if env else ''}{example.command}\n")
    return path


def _deployment(example: Example, tmp_path: Path) -> Path:
    """The example as a Deployment: the engine container runs ``command`` (with one GPU)
    next to the pod mates, in the shape LMCache's Kubernetes example uses
    (https://github.com/LMCache/LMCache/pull/2128: a vLLM container and an
    `lmcache server` container in one pod)."""
    engine: dict[str, Any] = {
        "name": "vllm",
        "image": example.image or f"vllm/vllm-openai:v{example.version}",
        "command": shlex.split(example.command),
        "resources": {"limits": {"nvidia.com/gpu": 1}},
    }
    if example.env:
        engine["env"] = [{"name": k, "value": v} for k, v in sorted(example.env.items())]
    mates: list[dict[str, Any]] = []
    for mate in example.pod_mates:
        container: dict[str, Any] = {"name": mate.name, "image": mate.image}
        if mate.command:
            container["command"] = shlex.split(mate.command)
        if mate.gpus:
            container["resources"] = {"limits": {"nvidia.com/gpu": mate.gpus}}
        mates.append(container)
    manifest = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "engine"},
        "spec": {
            "selector": {"matchLabels": {"app": "engine"}},
            "template": {
                "metadata": {"labels": {"app": "engine"}},
                "spec": {"containers": [engine, *mates]},
            },
        },
    }
    path = tmp_path / "deploy.yaml"
    path.write_text(yaml.safe_dump(manifest, sort_keys=False))
    return path


def fired(
    kvtool_cli: Any,
    tmp_path: Path,
    example: Example,
    version: str,
    lmcache: str | None,
    releases: dict[str, str] | None = None,
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
    for component, release in sorted((example.releases if releases is None else releases).items()):
        args += ["--component-version", f"{component}={release}"]
    result = kvtool_cli(*args)
    assert result.exit_code in (0, 1), result.stderr
    found: list[dict[str, Any]] = json.loads(result.stdout)["findings"]
    return found


def _ids(findings: list[dict[str, Any]]) -> list[str]:
    return [f["evidence"]["record"] for f in findings]


def _known_releases(bug: BugRecord) -> list[str]:
    """Releases of the bug's component the tests can name: the release tables for vLLM
    and LMCache, the releases the generator read the wheels of for the others."""
    if bug.component == "vllm":
        return list(release_index().versions)
    if bug.component == "lmcache":
        return [r.version for r in lmcache_releases()]
    proof = proofs().get(bug.id)
    read = [check.release for check in proof.checks] if proof is not None else []
    return [*read, *([bug.fixed] if bug.fixed else [])]


def _outside(bug: BugRecord) -> list[str]:
    """Releases of the bug's component just outside its range (known ones only)."""
    known = _known_releases(bug)
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
        version, lmcache, others = example.version, example.lmcache, dict(example.releases)
        if bug.component == "vllm":
            version = release
        elif bug.component == "lmcache":
            lmcache = release
        else:
            others[bug.component] = release
        quiet = fired(kvtool_cli, tmp_path, example, version, lmcache, others)
        assert bug.id not in _ids(quiet), f"fires at {bug.component} {release}, outside the range"
