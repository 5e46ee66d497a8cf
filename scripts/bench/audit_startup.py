"""Benchmark ``kvtool audit``: cold start of one file, and per-file throughput in one process.

Cold start: the median wall time of N fresh ``kvtool audit FILE`` processes for a shell
script (``examples/lmcache-tp4.sh``) and for a Kubernetes manifest
(``examples/k8s-deployment.yaml``, which also loads PyYAML), beside the baseline of N
bare interpreter starts (``python -c pass``) measured in the same run, and a second
baseline, the dependency floor: a process that only imports the libraries every audit
needs (typer, rich, msgspec), which no change to kvtool's code can undercut.
Throughput: files audited per second by one in-process ``Auditor`` over a batch of
copies of the shipped examples, beside the baseline rate of only reading and
normalising them (the part of the audit that is not rules).

    python scripts/bench/audit_startup.py [--quick] [--json]

Targets (issue 2): cold start <= 250 ms median (both inputs); >= 200 files/s in one process.
Issue 26: cold start <= 1.2 x the dependency floor. kvtool's modules are byte-compiled
first, as an installed wheel's are: under PYTHONDONTWRITEBYTECODE a module edited since
its last .pyc would otherwise be compiled from source by every measured process.
"""

from __future__ import annotations

import argparse
import compileall
import json
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "lmcache-tp4.sh"
YAML_EXAMPLE = REPO / "examples" / "k8s-deployment.yaml"
BATCH_SOURCES = ("lmcache-tp4.sh", "native-offload-clean.sh", "compose.yaml", "k8s-deployment.yaml")
COLD_TARGET_MS = 250.0
FLOOR_RATIO_TARGET = 1.2  # cold start over the dependency floor, in CPU time (issue 26)
THROUGHPUT_TARGET = 200.0
DEPENDENCY_IMPORTS = "import typer, rich.console, msgspec"


def _children_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _interleaved_medians(
    commands: dict[str, list[str]], runs: int
) -> dict[str, tuple[float, float]]:
    """Median wall and median CPU (user + system) ms of ``runs`` fresh processes per command.

    The commands take turns (one run of each per round), so a slow phase of a shared
    machine falls on all of them alike instead of on whichever ran during it. CPU time
    is reported beside wall time because on a shared machine wall time also counts
    waiting for a core.
    """
    walls: dict[str, list[float]] = {name: [] for name in commands}
    cpus: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(runs):
        for name, argv in commands.items():
            cpu_before = _children_cpu_seconds()
            start = time.perf_counter()
            subprocess.run(
                argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False
            )
            walls[name].append((time.perf_counter() - start) * 1000)
            cpus[name].append((_children_cpu_seconds() - cpu_before) * 1000)
    return {
        name: (statistics.median(walls[name]), statistics.median(cpus[name])) for name in commands
    }


def cold_start(runs: int) -> dict[str, float]:
    python = sys.executable
    # Exactly what the `kvtool` console script runs.
    entry = "from kvtool.cli import main; main()"
    common = ["--vllm-version", "0.32.0", "--exit-zero"]
    medians = _interleaved_medians(
        {
            "baseline": [python, "-c", "pass"],
            "floor": [python, "-c", DEPENDENCY_IMPORTS],
            "audit": [python, "-c", entry, "audit", str(EXAMPLE), *common],
            "audit_yaml": [python, "-c", entry, "audit", str(YAML_EXAMPLE), *common],
        },
        runs,
    )
    (baseline, baseline_cpu), (floor, floor_cpu) = medians["baseline"], medians["floor"]
    (audit, audit_cpu), (audit_yaml, _) = medians["audit"], medians["audit_yaml"]
    return {
        "cold_start_median_ms": round(audit, 1),
        "baseline_python_start_median_ms": round(baseline, 1),
        "cold_start_over_baseline_ratio": round(audit / baseline, 2),
        "dependency_floor_median_ms": round(floor, 1),
        "cold_start_over_dependency_floor_ms": round(audit - floor, 1),
        # Steadier than the absolute figures when the host's speed drifts during a run.
        "cold_start_over_dependency_floor_ratio": round(audit / floor, 2),
        "cold_start_cpu_median_ms": round(audit_cpu, 1),
        "baseline_python_start_cpu_median_ms": round(baseline_cpu, 1),
        "dependency_floor_cpu_median_ms": round(floor_cpu, 1),
        "cold_start_cpu_over_dependency_floor_cpu_ms": round(audit_cpu - floor_cpu, 1),
        # CPU time does not count waiting for a core: the ratio a shared machine moves least.
        "cold_start_cpu_over_dependency_floor_cpu_ratio": round(audit_cpu / floor_cpu, 2),
        "cold_start_yaml_median_ms": round(audit_yaml, 1),
        "cold_start_yaml_over_baseline_ratio": round(audit_yaml / baseline, 2),
        "cold_start_target_ms": COLD_TARGET_MS,
    }


def throughput(files: int) -> dict[str, float]:
    from kvtool.audit.engine import Auditor
    from kvtool.audit.inputs import read_inputs
    from kvtool.audit.normalize import normalize
    from kvtool.audit.settings import AuditSettings
    from kvtool.audit.tables import ShippedTables
    from kvtool.releases import load_release

    with tempfile.TemporaryDirectory() as tmp:
        paths: list[Path] = []
        for index in range(files):
            source = REPO / "examples" / BATCH_SOURCES[index % len(BATCH_SOURCES)]
            target = Path(tmp) / f"{index:05d}-{source.name}"
            shutil.copy(source, target)
            paths.append(target)
        settings = AuditSettings(vllm_version="0.32.0")
        facts = load_release("0.32.0")
        # Warm the per-process caches (tables, semantics) so both loops measure per-file work.
        Auditor(ShippedTables(), normalize, settings).run(read_inputs(paths[:1]))

        start = time.perf_counter()
        for path in paths:
            for invocation in read_inputs([path]):
                normalize(invocation, facts)
        read_seconds = time.perf_counter() - start

        start = time.perf_counter()
        findings = 0
        for path in paths:
            report = Auditor(ShippedTables(), normalize, settings).run(read_inputs([path]))
            findings += len(report.findings)
        audit_seconds = time.perf_counter() - start
    return {
        "files": files,
        "findings": findings,
        "audit_files_per_second": round(files / audit_seconds, 1),
        "baseline_read_normalize_files_per_second": round(files / read_seconds, 1),
        "audit_over_baseline_time_ratio": round(audit_seconds / read_seconds, 2),
        "throughput_target_files_per_second": THROUGHPUT_TARGET,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="fewer runs (finishes within a minute)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    runs, files = (5, 100) if args.quick else (21, 1000)
    compileall.compile_dir(REPO / "kvtool", quiet=1)
    from rich.console import Console

    console = Console(stderr=True)
    label = f"cold start: {runs} runs each of python -c pass, the dependency floor, two audits"
    with console.status(label):
        results: dict[str, float] = cold_start(runs)
    with console.status(f"throughput: auditing {files} files in one process"):
        results |= throughput(files)
    results["cold_start_meets_target"] = float(
        max(results["cold_start_median_ms"], results["cold_start_yaml_median_ms"]) <= COLD_TARGET_MS
    )
    results["cold_start_meets_floor_ratio_target"] = float(
        results["cold_start_cpu_over_dependency_floor_cpu_ratio"] <= FLOOR_RATIO_TARGET
    )
    results["throughput_meets_target"] = float(
        results["audit_files_per_second"] >= THROUGHPUT_TARGET
    )
    if args.json:
        print(json.dumps(results))
    else:
        for key, value in results.items():
            print(f"{key:45} {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
