#!/usr/bin/env python3
"""Prove every rule premise's release range from the wheels (``rules/audit/premises.json``).

    python scripts/gen_premises.py           # prove and rewrite rules/audit/premises.json
    python scripts/gen_premises.py --check   # CI: exit 1 when a proof differs from the file
    python scripts/gen_premises.py --check --only p2p.pythonhashseed_required   # a few

Each premise of ``rules/curated/premises.toml`` names a marker (wheel path glob and text)
and a range. The marker must be present at the range's first release and absent at the
release before it, present at the last release before ``until`` and absent at ``until``
(``releasegen.prover``, the prover the bug database uses; a range open at both ends is
checked at the oldest and newest release). The file records every check with the sha256
of the wheel read, whether the range was proven, and the newest release checked: the
audit treats a premise as unverified past that release or where the proof failed.
Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
import tomllib
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from generated_files import write_or_check
from releasegen.prover import Check, Marker, Prover

REPO = Path(__file__).resolve().parent.parent
CURATED = REPO / "rules" / "curated" / "premises.toml"
SEMANTICS = REPO / "rules" / "curated" / "semantics.toml"
AUDIT_SEMANTICS = REPO / "rules" / "audit" / "semantics.toml"
OUTPUT = REPO / "rules" / "audit" / "premises.json"
COMMAND = "python scripts/gen_premises.py"


def _semantics_range(key: str) -> tuple[str | None, str | None]:
    rows = [r for r in tomllib.loads(SEMANTICS.read_text())["rows"] if r["key"] == key]
    if len(rows) != 1:
        raise SystemExit(f"{CURATED.name}: {key}: expected one semantics row, found {len(rows)}")
    return rows[0].get("since"), rows[0].get("until")


def _audit_range(key: str) -> tuple[str | None, str | None]:
    table = tomllib.loads(AUDIT_SEMANTICS.read_text()).get(key)
    if not isinstance(table, dict):
        raise SystemExit(f"{CURATED.name}: {key}: no [{key}] table in {AUDIT_SEMANTICS.name}")
    return table.get("since"), table.get("until")


def premise_range(row: dict[str, Any]) -> tuple[str | None, str | None]:
    """since/until of a premise row, from the table its ``range`` names or the row itself."""
    source = row.get("range")
    if source == "semantics":
        return _semantics_range(row["id"])
    if source == "audit":
        return _audit_range(row["id"])
    if source is not None:
        raise SystemExit(f"{CURATED.name}: {row['id']}: range must be semantics or audit")
    return row.get("since"), row.get("until")


def _check_json(check: Check, expected: bool) -> dict[str, Any]:
    return {**check.as_json(), "expected": expected}


def prove(prover: Prover, row: dict[str, Any]) -> dict[str, Any]:
    """The committed record of one premise: its range, every check and the verdict."""
    package = row["package"]
    since, until = premise_range(row)
    marker = Marker(**row["marker"])
    # "affected": the marker is the premise's own code, present inside the range; "fixed":
    # the marker is what replaced it at `until` (absent inside, present from `until`), and
    # `introduced_marker` is the code that appears at `since`.
    means = row.get("means", "affected")
    start = Marker(**row["introduced_marker"]) if "introduced_marker" in row else None
    releases = prover.releases(package)
    if since is None and until is None:
        # Open at both ends: the marker must be there at the oldest and the newest release.
        pairs = [(prover.check(package, r, marker), True) for r in (releases[0], releases[-1])]
    else:
        boundary = prover.boundary(
            package, marker, introduced=since, fixed=until, means=means, introduced_marker=start
        )
        pairs = list(boundary.checks)
    if since is None:
        # The range claims the oldest release too; the boundary only looks at its ends.
        oldest = prover.check(package, releases[0], marker)
        pairs.insert(0, (oldest, means == "affected"))
    if until is None and since is not None and releases[-1] != since:
        # Open at the top: it still holds at the newest release read.
        pairs.append((prover.check(package, releases[-1], marker), means == "affected"))
    checks = [_check_json(c, want) for c, want in pairs]
    disagreements = [
        f"{c['release']}: marker {'present' if c['present'] else 'absent'}"
        f" (expected {'present' if c['expected'] else 'absent'})"
        for c in checks
        if c["present"] != c["expected"]
    ]
    return {
        "id": row["id"],
        "package": package,
        "rules": row["rules"],
        "statement": row["statement"],
        "source": row["source"],
        "since": since,
        "until": until,
        "marker": marker.as_json(),
        "means": means,
        "proven": not disagreements,
        "disagreements": disagreements,
        "checked_through": releases[-1],
        "checks": checks,
    }


def derive(prover: Prover, only: list[str] | None = None) -> str:
    """The file's text: every premise proven, or ``only`` these re-proven into the
    committed file (so a check of a few compares exactly what a full run would write)."""
    rows = tomllib.loads(CURATED.read_text())["premises"]
    committed: dict[str, Any] = {}
    if only and OUTPUT.is_file():
        committed = {r["id"]: r for r in json.loads(OUTPUT.read_text())["premises"]}
    records = []
    for row in rows:
        if only and row["id"] not in only and row["id"] in committed:
            records.append(committed[row["id"]])
            continue
        print(f"proving {row['id']}", file=sys.stderr)
        records.append(prove(prover, row))
        if not records[-1]["proven"]:
            print(f"  not proven: {'; '.join(records[-1]['disagreements'])}", file=sys.stderr)
    data = {"generated_by": COMMAND, "curated": "rules/curated/premises.toml", "premises": records}
    return json.dumps(data, indent=1, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only compare, do not write")
    parser.add_argument("--only", nargs="+", help="re-prove only these premise ids")
    parser.add_argument("--cache-dir", type=Path, help="wheel cache (default: the prover's)")
    args = parser.parse_args(argv)
    text = derive(Prover(cache_dir=args.cache_dir), args.only)
    status = write_or_check({OUTPUT: text}, COMMAND, check=args.check)
    if args.check and status == 0:
        print("premises: no drift", file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
