"""Loading one release table plus the cross-release index, as `kvtool audit` does at start-up.

Usage: python scripts/bench/release_tables.py [--quick] [--json] [--version 0.32.0]

Two figures, each beside a baseline measured in the same run:

* in-process load: ``load_release(version)`` + ``release_index()`` with their caches
  cleared (file read, JSON parse, pydantic validation) against a bare ``json.loads`` of
  the same two files. Target: well under 30 ms.
* cold process: ``python -c "from kvtool.releases import ...; load..."`` against a bare
  ``python -c pass`` start, median wall time of fresh interpreters.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

from rich.console import Console

console = Console(stderr=True, highlight=False)


def _median_ms(fn: Callable[[], object], reps: int) -> float:
    fn()  # warm-up: page cache, imports
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def _process_ms(code: str, reps: int) -> float:
    cmd = [sys.executable, "-c", code]
    subprocess.run(cmd, check=True)  # warm-up
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        subprocess.run(cmd, check=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (< 1 minute)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--version", default="0.32.0")
    args = parser.parse_args()

    from kvtool.releases import loader

    table_path = loader.releases_dir() / f"{args.version}.json"
    index_path = loader.releases_dir() / "index.json"
    reps, proc_reps = (30, 5) if args.quick else (200, 20)

    def raw() -> None:
        json.loads(table_path.read_bytes())
        json.loads(index_path.read_bytes())

    def validated() -> None:
        loader.load_release.cache_clear()
        loader.release_index.cache_clear()
        loader.load_release(args.version)
        loader.release_index()

    with console.status("timing in-process loads"):
        raw_ms = _median_ms(raw, reps)
        load_ms = _median_ms(validated, reps)
    with console.status("timing fresh interpreters"):
        bare_ms = _process_ms("pass", proc_reps)
        cold_ms = _process_ms(
            "from kvtool.releases import load_release, release_index;"
            f"load_release({args.version!r}); release_index()",
            proc_reps,
        )

    result = {
        "version": args.version,
        "table_bytes": table_path.stat().st_size,
        "index_bytes": index_path.stat().st_size,
        "load_table_and_index_ms": round(load_ms, 3),
        "baseline_json_loads_ms": round(raw_ms, 3),
        "load_vs_json_loads_ratio": round(load_ms / raw_ms, 2),
        "cold_process_load_ms": round(cold_ms, 1),
        "baseline_bare_interpreter_ms": round(bare_ms, 1),
        "cold_process_vs_bare_ratio": round(cold_ms / bare_ms, 2),
    }
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            console.print(f"{key:32} {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
