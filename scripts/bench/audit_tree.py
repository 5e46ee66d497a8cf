"""Benchmark ``kvtool audit DIR`` on a repository-sized tree, against only reading it.

Generates a tree of 10,000 files (``--quick``: 1,000), of which 2% are deployment files
(Kubernetes manifests of several kinds, Helm values, compose files, serve scripts,
Dockerfiles), the rest what repositories hold beside them (Python, Markdown, CI YAML,
JSON, unrelated scripts, chart templates). It then times, in the same run and
alternating so a slow phase of a shared machine hits both alike:

* ``cat``: reading every file of the tree (``find -type f -exec cat {} +``);
* ``audit``: ``kvtool audit TREE --output-format json`` in a fresh process (walk,
  detection, parsing, rules, report).

Prints files/s for the audit and its wall-time ratio to ``cat`` (the target, issue 11:
within 3x), and both commands' CPU time beside it. kvtool runs as installed, with its
modules' bytecode on disk (written by an untimed first run; ``--source-each-run``
keeps a PYTHONDONTWRITEBYTECODE=1 environment as it is, recompiling every start).

    python scripts/bench/audit_tree.py [--quick] [--json] [--runs N] [--source-each-run]

``--quick`` (1,000 files) is a smoke run: there the interpreter start and the rule
engine's imports, a fixed ~0.6 s of CPU, dwarf the walk, so its ratio says nothing
about the target.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FILES = 10_000
DEPLOYMENT_SHARE = 0.02
TARGET_RATIO = 3.0

_K8S = """\
apiVersion: apps/v1
kind: {kind}
metadata: {{name: vllm-{n}}}
spec:
  template:
    spec:
      containers:
        - name: vllm
          image: vllm/vllm-openai:v0.32.0
          command: ["vllm", "serve"]
          args: ["m{n}", "--tensor-parallel-size", "2", "--kv-offloading-size", "{n}"]
"""
_VALUES = """\
servingEngineSpec:
  modelSpec:
  - name: m{n}
    repository: lmcache/vllm-openai
    tag: v0.3.1
    modelURL: org/m{n}
    vllmConfig: {{maxModelLen: 4096, extraArgs: ["--max-num-seqs", "{n}"]}}
"""
_COMPOSE = """\
services:
  vllm:
    image: vllm/vllm-openai:v0.32.0
    command: ["m{n}", "--port", "8000", "--max-num-seqs", "{n}"]
"""
_SCRIPT = "#!/bin/sh\nexport PYTHONHASHSEED=0\nexec vllm serve m{n} --max-num-seqs {n}\n"
_DOCKERFILE = 'FROM vllm/vllm-openai:v0.32.0\nCMD ["m{n}", "--max-num-seqs", "{n}"]\n'
_DEPLOYMENT = (
    ("k8s/deploy-{n}.yaml", _K8S.replace("{kind}", "Deployment")),
    ("k8s/sts-{n}.yaml", _K8S.replace("{kind}", "StatefulSet")),
    ("helm/values-{n}.yaml", _VALUES),
    ("compose/compose-{n}.yaml", _COMPOSE),
    ("scripts/serve-{n}.sh", _SCRIPT),
    ("docker/{n}/Dockerfile", _DOCKERFILE),
)
_OTHER = (
    ("src/pkg{d}/mod_{n}.py", "def f_{n}(x):\n    return x + {n}\n" * 20),
    ("docs/page-{n}.md", "# Page {n}\n\nSome prose about serving.\n" * 10),
    (".ci/job-{n}.yaml", "on: [push]\njobs:\n  t{n}:\n    runs-on: ubuntu-latest\n"),
    ("data/item-{n}.json", '{{"id": {n}, "tags": ["a", "b"]}}\n'),
    ("tools/build-{n}.sh", "#!/bin/sh\nset -e\nmake target-{n}\n"),
    ("chart/templates/t-{n}.yaml", "kind: ConfigMap\nmetadata:\n  name: {{{{ .Release.Name }}}}\n"),
)


def make_tree(root: Path, files: int) -> dict[str, int]:
    deployments = int(files * DEPLOYMENT_SHARE)
    counts = {"deployment": 0, "other": 0}
    for n in range(files):
        if n < deployments:
            pattern, body = _DEPLOYMENT[n % len(_DEPLOYMENT)]
            kind = "deployment"
        else:
            pattern, body = _OTHER[n % len(_OTHER)]
            kind = "other"
        path = root / pattern.format(n=n, d=n % 50)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body.format(n=n))
        counts[kind] += 1
    return counts


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _time(
    argv: list[str], env: dict[str, str] | None = None
) -> tuple[float, float, subprocess.CompletedProcess[bytes]]:
    """Wall seconds, CPU seconds (user + system, the process and its children) and result."""
    cpu, start = _children_cpu(), time.perf_counter()
    done = subprocess.run(argv, capture_output=True, check=False, env=env)
    return time.perf_counter() - start, _children_cpu() - cpu, done


def _compiled_env(cache: Path) -> dict[str, str]:
    """The environment of an installed kvtool: its modules' bytecode is on disk.

    pip compiles a package's modules when it installs them; a development shell with
    PYTHONDONTWRITEBYTECODE=1 instead recompiles every module at every start (about
    0.2 s of CPU here), which says nothing about the audit. The bytecode goes to a
    cache under the benchmark's temporary folder, written by an untimed first run.
    """
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(cache)
    return env


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="1,000 files instead of 10,000")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--runs", type=int, default=3, help="timed runs of each (median)")
    parser.add_argument(
        "--source-each-run",
        action="store_true",
        help="keep the caller's environment (with PYTHONDONTWRITEBYTECODE=1, every run "
        "compiles kvtool's modules from source)",
    )
    args = parser.parse_args()
    files = FILES // 10 if args.quick else FILES
    entry = "import sys; from kvtool.cli import run; sys.exit(run(sys.argv[1:]))"
    kvtool = [sys.executable, "-c", entry]
    root = Path(tempfile.mkdtemp(prefix="kvtool-audit-tree-"))
    try:
        counts = make_tree(root, files)
        cat = ["sh", "-c", f"find '{root}' -type f -exec cat {{}} + > /dev/null"]
        audit = [*kvtool, "audit", str(root), "--output-format", "json", "--exit-zero"]
        env = None if args.source_each_run else _compiled_env(root.with_name(root.name + "-pyc"))
        _time(audit, env)  # untimed: writes the bytecode, warms the page cache
        cat_times: list[float] = []
        audit_times: list[float] = []
        cat_cpu: list[float] = []
        audit_cpu: list[float] = []
        report: dict[str, object] = {}
        for _ in range(max(1, args.runs)):
            elapsed, cpu, _done = _time(cat)
            cat_times.append(elapsed)
            cat_cpu.append(cpu)
            elapsed, cpu, done = _time(audit, env)
            if done.returncode != 0:
                sys.stderr.write(done.stderr.decode(errors="replace"))
                return 2
            audit_times.append(elapsed)
            audit_cpu.append(cpu)
            report = json.loads(done.stdout)
    finally:
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(root.with_name(root.name + "-pyc"), ignore_errors=True)
    cat_s, audit_s = statistics.median(cat_times), statistics.median(audit_times)
    invocations = report.get("invocations", [])
    skipped = report.get("skipped", [])
    figures = {
        "files": files,
        "deployment_files": counts["deployment"],
        "invocations_found": len(invocations) if isinstance(invocations, list) else None,
        "files_skipped": len(skipped) if isinstance(skipped, list) else None,
        "cat_s": round(cat_s, 3),
        "audit_s": round(audit_s, 3),
        "audit_files_per_s": round(files / audit_s),
        "ratio_to_cat": round(audit_s / cat_s, 2),
        "cat_cpu_s": round(statistics.median(cat_cpu), 3),
        "audit_cpu_s": round(statistics.median(audit_cpu), 3),
        "target_ratio": TARGET_RATIO,
        "runs": max(1, args.runs),
        "bytecode": "compiled each run" if args.source_each_run else "cached, as installed",
    }
    if args.json:
        sys.stdout.write(json.dumps(figures, indent=2) + "\n")
    else:
        sys.stdout.write(
            f"{files} files ({counts['deployment']} deployment files, "
            f"{figures['invocations_found']} invocations found, "
            f"{figures['files_skipped']} skipped with a note)\n"
            f"cat:   {cat_s:.3f} s\n"
            f"audit: {audit_s:.3f} s = {figures['audit_files_per_s']} files/s, "
            f"{figures['ratio_to_cat']}x cat (target <= {TARGET_RATIO}x)\n"
            f"CPU:   cat {figures['cat_cpu_s']} s, audit {figures['audit_cpu_s']} s "
            "(wall time on a shared machine also counts waiting for a core)\n"
            f"kvtool's bytecode: {figures['bytecode']}\n"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
