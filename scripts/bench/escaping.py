"""Benchmark the text report on hostile text: escaping must stay linear in the input.

A flag name of N backslashes (single-quoted, so the shell keeps them all, and followed by
no markup tag) once made the text report quadratic: rich's markup escaping and parsing
try the run from every one of its positions. This audits that script in-process and,
as the baseline measured in the same run, the same script with letters in place of the
backslashes; the ratio is the cost of the backslashes alone. Linear is about 2, not 1:
the findings quote the flag in Python's repr, which doubles every backslash, so the
report has twice the characters to escape and write.

    python scripts/bench/escaping.py [--quick] [--json]

Target (issue 27): ratio <= 3 at 100 KB; it grows with the size when escaping is
quadratic (before the fix: minutes at 100 KB).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import statistics
import tempfile
import time
from pathlib import Path

RATIO_TARGET = 3.0


def _script(directory: Path, name: str, run: str) -> Path:
    path = directory / name
    path.write_text(f"vllm serve m --calculate-kv-scales '--bogus{run}=1'\n")
    return path


def _audit_seconds(path: Path, repeats: int) -> float:
    from kvtool.cli import run

    times = []
    for _ in range(repeats):
        sink = io.StringIO()
        started = time.perf_counter()
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(io.StringIO()):
            run(["audit", str(path), "--vllm-version", "0.32.0", "--color", "never"])
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20 KB instead of 100 KB")
    parser.add_argument("--json", action="store_true", help="one JSON line")
    args = parser.parse_args()
    size = 20_000 if args.quick else 100_000
    repeats = 3 if args.quick else 5
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        hostile = _script(root, "backslashes.sh", "\\" * size)
        baseline = _script(root, "letters.sh", "a" * size)
        _audit_seconds(baseline, 1)  # warm: imports and release tables
        base_s = _audit_seconds(baseline, repeats)
        hostile_s = _audit_seconds(hostile, repeats)
    ratio = hostile_s / base_s
    result = {
        "bench": "escaping",
        "input_chars": size,
        "baseline_s": round(base_s, 4),
        "backslashes_s": round(hostile_s, 4),
        "ratio": round(ratio, 2),
        "target_ratio": RATIO_TARGET,
        "ok": ratio <= RATIO_TARGET,
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"text report on {size} chars: letters {base_s * 1000:.0f} ms, backslashes "
            f"{hostile_s * 1000:.0f} ms, ratio {ratio:.2f} (target <= {RATIO_TARGET:g})"
        )
    raise SystemExit(0 if result["ok"] else 1)


if __name__ == "__main__":
    main()
