#!/usr/bin/env python3
"""Prove each known-bug record's release range from the wheels; write rules/bugs/proofs.json.

    python scripts/gen_bug_ranges.py                 # prove every record with a marker
    python scripts/gen_bug_ranges.py --check         # exit 1 when a proof drifts or fails
    python scripts/gen_bug_ranges.py --only KB-VLLM-45268
    python scripts/gen_bug_ranges.py --scan vllm vllm/v1/core/sched/scheduler.py 'text'

A record's marker (``rules/bugs/<component>.toml``, see ``kvtool.bugdb.model.Marker``)
is looked up with ``releasegen.prover`` in the component's wheel on both sides of each end
of its range: the release before ``introduced`` and ``introduced``, the release before
``fixed`` and ``fixed``. An open end is checked at the far release instead (an open bug's
buggy code must still be in the newest release, so ``--check`` fails the day a release
fixes it). ``proofs.json`` records every wheel read (file name and sha256) and whether
the marker agreed; a record whose checks disagree is named on stderr and the run exits 1.
Records without a marker say why (``unproven``) and are reported "may affect".
``--scan`` prints, per release, ``+`` (marker present), ``-`` (absent) or ``.`` (no such
file): how a record's boundary is found before it is written down.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import msgspec
from generated_files import write_or_check
from packaging.version import Version
from releasegen.prover import Check, Marker, Prover, ProverError

from kvtool.bugdb.model import BugRecord
from kvtool.bugdb.store import PROOFS, bugs_dir, records

GENERATOR_VERSION = 1
# The record schema as JSON Schema, for editors and other tools reading rules/bugs/.
SCHEMA = Path(__file__).resolve().parent.parent / "docs" / "schemas" / "bug-record.schema.json"


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def markers_of(bug: BugRecord) -> tuple[Marker, Marker | None]:
    assert bug.marker is not None
    m = bug.marker
    start = None
    if m.introduced_path and m.introduced_pattern:
        start = Marker(
            path=m.introduced_path, pattern=m.introduced_pattern, regex=m.introduced_regex
        )
    return Marker(path=m.path, pattern=m.pattern, regex=m.regex), start


def prove(prover: Prover, bug: BugRecord) -> dict[str, object]:
    """Every check of ``bug``'s range as JSON (``expected`` next to what was found)."""
    assert bug.marker is not None and bug.package is not None
    marker, start = markers_of(bug)
    means = bug.marker.means
    bound = prover.boundary(
        bug.package,
        marker,
        introduced=bug.introduced,
        fixed=bug.fixed,
        means=means,
        introduced_marker=start,
    )
    checks: list[tuple[Check, bool]] = list(bound.checks)
    releases = prover.releases(bug.package)
    if means == "affected" and bug.fixed is None:
        checks.append((prover.check(bug.package, releases[-1], marker), True))
    if means == "affected" and bug.introduced is None:
        checks.append((prover.check(bug.package, releases[0], marker), True))
    if means == "fixed" and bug.fixed is None:
        raise ProverError(f"{bug.id}: a fix marker needs a fixed release")
    unique: dict[tuple[str, str], dict[str, object]] = {}
    for check, expected in checks:
        row = {**check.as_json(), "expected": expected}
        unique[(check.release, json.dumps(row, sort_keys=True))] = row
    ordered = sorted(unique.values(), key=lambda r: Version(str(r["release"])))
    entry: dict[str, object] = {
        "package": bug.package,
        "introduced": bug.introduced,
        "fixed": bug.fixed,
        "checks": ordered,
    }
    if means == "fixed" and bug.introduced is not None and start is None:
        entry["unchecked"] = ["introduced"]
    return entry


def scan(args: argparse.Namespace) -> int:
    prover = Prover()
    package, path, pattern = args.scan
    marker = Marker(path=path, pattern=pattern, regex=args.regex)
    releases = [
        r
        for r in prover.releases(package)
        if args.since is None or Version(r) >= Version(args.since)
    ]
    line = []
    for hit in prover.scan(package, marker, releases):
        line.append(("+" if hit.present else "-" if hit.file_found else ".") + hit.release)
    print(" ".join(line))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail when proofs.json drifts")
    parser.add_argument("--only", nargs="+", metavar="ID", help="prove only these records")
    parser.add_argument("--scan", nargs=3, metavar=("PACKAGE", "PATH", "PATTERN"))
    parser.add_argument("--regex", action="store_true", help="--scan PATTERN is a regex")
    parser.add_argument("--since", help="--scan from this release on")
    args = parser.parse_args(argv)
    if args.scan:
        return scan(args)

    path = bugs_dir() / PROOFS
    previous = json.loads(path.read_text()) if path.is_file() else {"records": {}}
    kept: dict[str, object] = dict(previous.get("records", {}))
    prover = Prover()
    started = time.monotonic()
    failed: list[str] = []
    proven: dict[str, object] = {}
    for bug in records():
        if bug.marker is None or bug.package is None:
            continue
        if args.only and bug.id not in args.only:
            if bug.id in kept:
                proven[bug.id] = kept[bug.id]
            continue
        try:
            entry = prove(prover, bug)
        except ProverError as exc:
            _log(f"{bug.id}: {exc}")
            failed.append(bug.id)
            continue
        bad = [c for c in entry["checks"] if c["present"] != c["expected"]]  # type: ignore[attr-defined]
        for c in bad:
            want = "present" if c["expected"] else "absent"
            _log(f"{bug.id}: {bug.package} {c['release']}: marker not {want} ({bug.marker.path})")
        if bad:
            failed.append(bug.id)
        elif entry.get("unchecked"):
            _log(f"{bug.id}: {entry['unchecked']} not checked by any marker: may affect")
        proven[bug.id] = entry
    partial = sum(1 for e in proven.values() if isinstance(e, dict) and e.get("unchecked"))
    _log(
        f"proved {len(proven) - len(failed) - partial} of {len(proven)} marked records"
        f" ({partial} with an end no marker checks) in {time.monotonic() - started:.1f}s"
    )
    text = json.dumps(
        {"generator_version": GENERATOR_VERSION, "records": dict(sorted(proven.items()))},
        indent=1,
        sort_keys=True,
    )
    schema = json.dumps(msgspec.json.schema(BugRecord), indent=2) + "\n"
    stale = write_or_check(
        {path: text + "\n", SCHEMA: schema}, "python scripts/gen_bug_ranges.py", check=args.check
    )
    return 1 if failed or stale else 0


if __name__ == "__main__":
    raise SystemExit(main())
