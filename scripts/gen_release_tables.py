#!/usr/bin/env python3
"""Generate ``rules/releases/<version>.json`` and ``index.json`` from released vLLM wheels.

    python scripts/gen_release_tables.py                       # every release 0.4.0..newest
    python scripts/gen_release_tables.py --versions 0.32.0 0.33.0
    python scripts/gen_release_tables.py --check --versions 0.10.2 0.32.0   # exit 1 on drift
    python scripts/gen_release_tables.py --discard-wheels      # delete each wheel once read

Wheels are fetched with ``pip download --no-deps`` into ``.cache/wheels/`` (kept between
runs unless ``--discard-wheels``) and read with ``ast`` straight from the zip; vLLM is
never imported. One download runs at a time, in a background thread, while the wheel
before it is parsed, so at most two wheels (a few hundred MB each) are on disk at once.
Progress and the run time go to stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

_REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

import msgspec  # noqa: E402
from packaging.version import InvalidVersion, Version  # noqa: E402
from releasegen import wheels  # noqa: E402
from releasegen.build import build_release, sha256_of  # noqa: E402
from releasegen.index import build_index  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.progress import Progress  # noqa: E402

from kvtool.releases.curated import flag_replacements  # noqa: E402
from kvtool.releases.model import ReleaseFacts, ReleaseIndex  # noqa: E402

console = Console(stderr=True)


def dump_table(table: ReleaseFacts) -> str:
    data = msgspec.to_builtins(table)  # fields at their defaults are left out
    return json.dumps(data, indent=1, ensure_ascii=False) + "\n"


def dump_index(index: ReleaseIndex) -> str:
    data = msgspec.to_builtins(index)
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False) + "\n"


def _diff(committed: ReleaseFacts, derived: ReleaseFacts) -> list[str]:
    lines: list[str] = []
    if committed.wheel.sha256 != derived.wheel.sha256:
        lines.append(f"wheel sha256 {committed.wheel.sha256[:12]} -> {derived.wheel.sha256[:12]}")
    for attr in ("flags", "env_vars", "connectors"):
        old = {x.name: x for x in getattr(committed, attr)}
        new = {x.name: x for x in getattr(derived, attr)}
        for name in sorted(old.keys() - new.keys()):
            lines.append(f"{attr}: {name} no longer derived")
        for name in sorted(new.keys() - old.keys()):
            lines.append(f"{attr}: {name} newly derived")
        for name in sorted(old.keys() & new.keys()):
            if old[name] != new[name]:
                lines.append(f"{attr}: {name} changed")
    for attr in (
        "offload_specs",
        "offload_tiers",
        "offload_extra_config_keys",
        "kv_transfer_config_fields",
        "kv_transfer_config_forbids_extra",
        "hma",
        "model_registry",
        "notes",
    ):
        if getattr(committed, attr) != getattr(derived, attr):
            lines.append(f"{attr} changed")
    return lines


def _release(text: str) -> str:
    try:
        return str(Version(text.lstrip("v")))
    except InvalidVersion as exc:
        raise argparse.ArgumentTypeError(f"not a release version: {text!r}") from exc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--versions", nargs="+", type=_release, help="releases to derive (default: all)"
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="re-derive and compare with the committed tables; exit 1 on drift",
    )
    parser.add_argument("--cache-dir", type=Path, default=_REPO / ".cache" / "wheels")
    parser.add_argument(
        "--discard-wheels",
        action="store_true",
        help="delete each wheel once its table is derived (wheels are 100-400 MB each)",
    )
    parser.add_argument("--out", type=Path, default=_REPO / "rules" / "releases")
    args = parser.parse_args(argv)

    pip = wheels.default_pip()
    versions = args.versions or wheels.released_versions(pip)
    versions = sorted(set(versions), key=Version)
    if not versions:
        console.print("[red]error[/red] no vLLM release to derive")
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    drift: list[str] = []

    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=1) as pool, Progress(console=console) as progress:
        task = progress.add_task("deriving release tables", total=len(versions))
        # Only the next wheel is fetched ahead: the whole list would fill the disk.
        upcoming: Future[Path] | None = pool.submit(
            wheels.download, pip, args.cache_dir, versions[0]
        )
        for position, version in enumerate(versions):
            progress.update(task, description=f"vLLM {version}")
            assert upcoming is not None
            try:
                wheel = upcoming.result()
            except RuntimeError as exc:  # pip could not fetch it: say which, stop cleanly
                console.print(f"[red]error[/red] vLLM {version}: {exc}")
                return 2
            following = versions[position + 1] if position + 1 < len(versions) else None
            upcoming = (
                pool.submit(wheels.download, pip, args.cache_dir, following)
                if following is not None
                else None
            )
            table = build_release(version, wheel, sha256_of(wheel))
            if args.discard_wheels:
                wheel.unlink()
            target = args.out / f"{version}.json"
            if args.check:
                if not target.exists():
                    drift.append(f"{version}: no committed table")
                else:
                    committed = msgspec.json.decode(target.read_bytes(), type=ReleaseFacts)
                    drift += [f"{version}: {line}" for line in _diff(committed, table)]
            else:
                target.write_text(dump_table(table))
            progress.advance(task)
    console.print(f"derived {len(versions)} table(s) in {time.monotonic() - started:.0f} s")

    tables = [
        msgspec.json.decode(p.read_bytes(), type=ReleaseFacts)
        for p in sorted(args.out.glob("*.json"))
        if p.name != "index.json"
    ]
    index_text = dump_index(build_index(tables, flag_replacements()))
    index_path = args.out / "index.json"
    if args.check:
        if not index_path.exists() or index_path.read_text() != index_text:
            drift.append("index.json differs from the committed tables")
        for line in drift:
            console.print(f"[red]drift[/red] {line}")
        if drift:
            return 1
        console.print(f"[green]no drift[/green] in {len(versions)} release table(s)")
        return 0
    index_path.write_text(index_text)
    console.print(f"wrote {len(versions)} table(s) and index.json ({len(tables)} releases)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
