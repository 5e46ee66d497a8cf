#!/usr/bin/env python3
"""Read the ports `vllm serve` listens on by default from the wheels (listen_ports.json).

    python scripts/gen_listen_ports.py           # read every tabled release, rewrite the file
    python scripts/gen_listen_ports.py --check   # CI: exit 1 when the wheels say otherwise
    python scripts/gen_listen_ports.py --check --versions 0.10.2 0.34.0   # two releases only

Per release, parsed as source with ``ast`` (vLLM is never imported), from the OpenAI
server's argument definitions (``vllm/entrypoints/openai/cli_args.py`` up to 0.31,
``launchers/cli_args.py`` and ``common/cli_args.py`` after): ``api_server_port``, the
default of ``--port`` (an ``add_argument("--port", default=...)`` call on early releases,
the ``port: int = ...`` field of the frontend arguments' dataclass later).

Per LMCache release (its own wheels), from ``lmcache/v1/config.py``'s option table:
``internal_api_server_port_start``, the first port of LMCache's internal API servers (the
scheduler's, then one per worker).

The other listeners' defaults (the NIXL side channel, Mooncake's bootstrap server, the p2p
tier, the KV events publisher) are read by ``scripts/gen_constraints.py`` from the same
wheels; CN060 puts both tables together. Wheels come from ``releasegen.prover`` (its cache
and sha256 check); each release records the wheel's file name and sha256.
"""

from __future__ import annotations

import argparse
import ast
import fnmatch
import json
import sys
import zipfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from generated_files import write_or_check
from packaging.version import Version
from releasegen.prover import Prover

REPO = Path(__file__).resolve().parent.parent
OUTPUT = REPO / "rules" / "audit" / "listen_ports.json"
COMMAND = "python scripts/gen_listen_ports.py"
# The OpenAI-compatible server's argument modules across releases (not the demo
# vllm/entrypoints/api_server.py, which `vllm serve` never runs).
SERVER_ARGS = "vllm/entrypoints/*cli_args.py"


def _int(node: ast.expr | None) -> int | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return None if isinstance(node.value, bool) else node.value
    return None


def api_server_port(source: str) -> int | None:
    """The default of ``--port`` in one argument module, or None when it defines none."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and node.args:
            func = node.func
            named = isinstance(func, ast.Attribute) and func.attr == "add_argument"
            first = node.args[0]
            if named and isinstance(first, ast.Constant) and first.value == "--port":
                for keyword in node.keywords:
                    if keyword.arg == "default":
                        return _int(keyword.value)
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and node.target.id == "port"
        ):
            value = _int(node.value)
            if value is not None:
                return value
    return None


LMCACHE_CONFIG = "lmcache/v1/config.py"
LMCACHE_PORT_OPTIONS = ("internal_api_server_port_start",)


def lmcache_option_defaults(source: str) -> dict[str, int | None]:
    """Each of ``LMCACHE_PORT_OPTIONS`` -> its ``"default"`` in the option table (a dict
    literal ``"name": {"type": int, "default": 6999, ...}``), None where it is absent."""
    found: dict[str, int | None] = dict.fromkeys(LMCACHE_PORT_OPTIONS)
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Dict):
            continue
        for key, value in zip(node.keys, node.values, strict=True):
            named = isinstance(key, ast.Constant) and key.value in LMCACHE_PORT_OPTIONS
            if not named or not isinstance(value, ast.Dict):
                continue
            for inner_key, inner in zip(value.keys, value.values, strict=True):
                if isinstance(inner_key, ast.Constant) and inner_key.value == "default":
                    found[str(key.value)] = _int(inner)  # type: ignore[union-attr]
    return found


def read_lmcache_release(prover: Prover, version: str) -> dict[str, Any]:
    wheel = prover.wheel("lmcache", version)
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        source = archive.read(LMCACHE_CONFIG).decode() if LMCACHE_CONFIG in names else ""
    defaults = lmcache_option_defaults(source) if source else dict.fromkeys(LMCACHE_PORT_OPTIONS)
    return {"wheel": wheel.name, "sha256": prover.digest(wheel), **defaults}


def read_release(prover: Prover, version: str) -> dict[str, Any]:
    wheel = prover.wheel("vllm", version)
    sha256 = prover.digest(wheel)
    with zipfile.ZipFile(wheel) as archive:
        names = sorted(n for n in archive.namelist() if fnmatch.fnmatchcase(n, SERVER_ARGS))
        sources = {n: archive.read(n).decode("utf-8", errors="replace") for n in names}
    found = {path: port for path, port in ((p, api_server_port(t)) for p, t in sources.items())}
    ports = {port for port in found.values() if port is not None}
    if len(ports) > 1:
        raise SystemExit(f"vLLM {version}: --port has several defaults: {found}")
    return {
        "wheel": wheel.name,
        "sha256": sha256,
        "api_server_port": next(iter(ports), None),
        "read_from": sorted(path for path, port in found.items() if port is not None),
    }


def derive(prover: Prover, versions: list[str] | None = None) -> str:
    """The file's text: every tabled release, or ``versions`` re-read into the committed
    file (so a check of two releases compares exactly what a full run would write)."""
    releases: dict[str, Any] = {}
    lmcache: dict[str, Any] = {}
    if versions and OUTPUT.is_file():
        committed = json.loads(OUTPUT.read_text())
        releases, lmcache = committed["releases"], committed["lmcache"]
    for version in versions or prover.releases("vllm"):
        print(f"reading vLLM {version}", file=sys.stderr)
        releases[version] = read_release(prover, version)
    lmcache_versions = prover.releases("lmcache")
    # A check of a few releases re-reads LMCache's oldest and newest wheels.
    for version in [lmcache_versions[0], lmcache_versions[-1]] if versions else lmcache_versions:
        print(f"reading LMCache {version}", file=sys.stderr)
        lmcache[version] = read_lmcache_release(prover, version)
    data = {
        "generated_by": COMMAND,
        "releases": dict(sorted(releases.items(), key=lambda item: Version(item[0]))),
        "lmcache": dict(sorted(lmcache.items(), key=lambda item: Version(item[0]))),
    }
    return json.dumps(data, indent=1, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only compare, do not write")
    parser.add_argument("--versions", nargs="+", help="re-read only these releases")
    parser.add_argument("--cache-dir", type=Path, help="wheel cache (default: the prover's)")
    args = parser.parse_args(argv)
    text = derive(Prover(cache_dir=args.cache_dir), args.versions)
    status = write_or_check({OUTPUT: text}, COMMAND, check=args.check)
    if args.check and status == 0:
        print("listen ports: no drift", file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
