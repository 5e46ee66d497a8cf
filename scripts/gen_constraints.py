#!/usr/bin/env python3
"""Read the KV connectors' start-up constraints from the wheels (rules/audit/constraints.json).

    python scripts/gen_constraints.py           # read every tabled release, rewrite the file
    python scripts/gen_constraints.py --check   # CI: exit 1 when the wheels say otherwise
    python scripts/gen_constraints.py --check --versions 0.10.2 0.34.0   # two releases only

Per release, parsed as source with ``ast`` (vLLM is never imported):

* ``env_ports``: every ``VLLM_*PORT`` environment variable of ``vllm/envs.py`` whose
  default is a literal integer (the NIXL side channel, Mooncake's bootstrap server, the
  p2p tier's side channel, ...).
* ``kv_events_endpoint``: the default ``KVEventsConfig.endpoint`` (the ZMQ publisher), and
  ``kv_events_zmq_by_default``: whether enabling events alone picks the ZMQ publisher.
* ``env_hosts``: every ``VLLM_*HOST`` variable's literal default, and
  ``nixl_advertises_side_channel_host``: whether NixlConnector hands its side-channel host
  to the router as the ``remote_host`` the other side connects to.
* ``nixl_side_channel``: how NixlConnector derives each worker's listening port from
  ``VLLM_NIXL_SIDE_CHANNEL_PORT``: ``per_tp_rank`` when every TP worker listens on
  base + DP rank x TP + TP rank (else one port per DP rank).
* ``nixl_pp``: whether NixlConnector's code knows pipeline parallelism at all, and the
  start-up refusals it raises for ``pipeline_parallel_size > 1`` with the conditions they
  are raised under.
* ``nixl_refusals``: the refusals it raises for context, data or expert parallelism, with
  their conditions and the class that raises them.

Wheels come from ``releasegen.prover`` (its cache and sha256 check, the one the bug
database uses); each release records the wheel's file name and sha256.
"""

from __future__ import annotations

import argparse
import ast
import fnmatch
import json
import re
import sys
import zipfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from generated_files import write_or_check
from packaging.version import Version
from releasegen.prover import Prover

REPO = Path(__file__).resolve().parent.parent
OUTPUT = REPO / "rules" / "audit" / "constraints.json"
COMMAND = "python scripts/gen_constraints.py"
ENVS = "vllm/envs.py"
KV_EVENTS_CONFIGS = ("vllm/config/kv_events.py", "vllm/config/__init__.py")
NIXL_SOURCES = (
    "vllm/distributed/kv_transfer/kv_connector/v1/nixl_connector.py",
    "vllm/distributed/kv_transfer/kv_connector/v1/nixl/*.py",
)
PORT_ENV = re.compile(r"^VLLM_\w*PORT$")
HOST_ENV = re.compile(r"^VLLM_\w*HOST$")
# NixlConnector puts its side-channel host into the kv_transfer_params it hands the router.
NIXL_ADVERTISES_HOST = "remote_host=self.side_channel_host"
PP_WORDS = ("pp_size", "pipeline_parallel_size")
# The other parallelism a start-up refusal can name (context, data and expert parallel).
PARALLEL_WORDS = (
    "pcp_size", "prefill_context_parallel_size", "dcp_size", "decode_context_parallel_size",
    "data_parallel_size", "dp_size", "enable_expert_parallel",
)
ZMQ_DEFAULT = re.compile(r'publisher = "zmq" if self\.enable_kv_cache_events')


def _texts(archive: zipfile.ZipFile, patterns: tuple[str, ...]) -> dict[str, str]:
    names = sorted(
        n for n in archive.namelist() if any(fnmatch.fnmatchcase(n, p) for p in patterns)
    )
    return {n: archive.read(n).decode("utf-8", errors="replace") for n in names}


def env_ports(source: str) -> dict[str, int]:
    """``VLLM_*PORT`` -> its default, from ``os.getenv("NAME", "5557")`` in the lambdas."""
    found: dict[str, int] = {}
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and len(node.args) == 2):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name not in ("getenv", "get"):
            continue
        key, default = node.args
        if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
            continue
        if not PORT_ENV.match(key.value) or not isinstance(default, ast.Constant):
            continue
        text = str(default.value)
        if text.isdigit():
            found[key.value] = int(text)
    return dict(sorted(found.items()))


def env_hosts(source: str) -> dict[str, str]:
    """``VLLM_*HOST`` -> its literal default (``os.getenv("NAME", "localhost")``)."""
    found: dict[str, str] = {}
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and len(node.args) == 2):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        key, default = node.args
        if name not in ("getenv", "get") or not isinstance(key, ast.Constant):
            continue
        named = isinstance(key.value, str) and HOST_ENV.match(key.value)
        if named and isinstance(default, ast.Constant) and isinstance(default.value, str):
            found[str(key.value)] = default.value
    return dict(sorted(found.items()))


def kv_events_endpoint(source: str) -> str | None:
    """The default of ``KVEventsConfig.endpoint``."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef) and node.name == "KVEventsConfig":
            for item in node.body:
                if (
                    isinstance(item, ast.AnnAssign)
                    and isinstance(item.target, ast.Name)
                    and item.target.id == "endpoint"
                    and isinstance(item.value, ast.Constant)
                ):
                    return str(item.value.value)
    return None


def nixl_side_channel(sources: dict[str, str]) -> str | None:
    """``per_tp_rank`` or ``per_dp_rank``: the expression that offsets the base port."""
    for text in sources.values():
        for node in ast.walk(ast.parse(text)):
            if not isinstance(node, ast.BinOp):
                continue
            segment = ast.get_source_segment(text, node) or ""
            if "VLLM_NIXL_SIDE_CHANNEL_PORT" not in segment:
                continue
            return "per_tp_rank" if "tensor_parallel_size" in segment else "per_dp_rank"
    return None


def _raise_message(node: ast.Raise) -> str | None:
    exc = node.exc
    if isinstance(exc, ast.Call) and exc.args:
        parts = [
            v.value
            for v in ast.walk(exc.args[0])
            if isinstance(v, ast.Constant) and isinstance(v.value, str)
        ]
        return "".join(parts) or None
    return None


def _guarded_raises(
    text: str,
    body: list[ast.stmt],
    conditions: tuple[str, ...],
    words: tuple[str, ...] = PP_WORDS,
) -> list[dict[str, Any]]:
    """Each ``raise`` under ``if`` tests of which one names one of ``words``."""
    found: list[dict[str, Any]] = []
    for stmt in body:
        if isinstance(stmt, ast.If):
            test = ast.get_source_segment(text, stmt.test) or ""
            found += _guarded_raises(text, stmt.body, (*conditions, test), words)
            found += _guarded_raises(text, stmt.orelse, conditions, words)
        elif isinstance(stmt, ast.Raise) and any(w in c for c in conditions for w in words):
            message = _raise_message(stmt)
            if message:
                found.append({"conditions": list(conditions), "message": message})
        elif isinstance(stmt, ast.With | ast.For | ast.While | ast.Try):
            for inner in ("body", "orelse", "finalbody"):
                found += _guarded_raises(text, getattr(stmt, inner, []), conditions, words)
    return found


def nixl_parallel_refusals(sources: dict[str, str]) -> list[dict[str, Any]]:
    """NIXL's refusals for context, data or expert parallelism (PP ones are ``nixl_pp``'s),
    each with the class whose method raises it (a push-only class refuses only there)."""
    refusals: list[dict[str, Any]] = []
    for path, text in sources.items():
        for cls in ast.walk(ast.parse(text)):
            if not isinstance(cls, ast.ClassDef):
                continue
            for item in cls.body:
                if not isinstance(item, ast.FunctionDef):
                    continue
                for refusal in _guarded_raises(text, item.body, (), PARALLEL_WORDS):
                    if any(w in c for c in refusal["conditions"] for w in PP_WORDS):
                        continue
                    refusals.append({"file": path, "cls": cls.name, **refusal})
    return refusals


def nixl_pp(sources: dict[str, str]) -> dict[str, Any]:
    """Whether the NIXL code reads the PP size, and what it refuses when it is above 1."""
    aware = any(w in text for text in sources.values() for w in PP_WORDS)
    refusals: list[dict[str, Any]] = []
    for path, text in sources.items():
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef):
                for refusal in _guarded_raises(text, node.body, ()):
                    refusals.append({"file": path, **refusal})
    return {"pp_aware": aware, "refusals": refusals}


def read_release(prover: Prover, version: str) -> dict[str, Any]:
    wheel = prover.wheel("vllm", version)
    sha256 = prover.digest(wheel)
    with zipfile.ZipFile(wheel) as archive:
        envs = _texts(archive, (ENVS,))
        events = _texts(archive, KV_EVENTS_CONFIGS)
        nixl = _texts(archive, NIXL_SOURCES)
    # vllm/envs.py first ships in 0.4.1; before it no environment variable has a default here.
    env_source = envs.get(ENVS, "")
    endpoint = next(
        (e for e in (kv_events_endpoint(t) for t in events.values()) if e is not None), None
    )
    return {
        "wheel": wheel.name,
        "sha256": sha256,
        "env_ports": env_ports(env_source),
        "env_hosts": env_hosts(env_source),
        "nixl_advertises_side_channel_host": any(
            NIXL_ADVERTISES_HOST in text for text in nixl.values()
        ),
        "kv_events_endpoint": endpoint,
        # From the release that picks the ZMQ publisher itself when events are enabled;
        # before it the default publisher is "null" (nothing binds) unless set to "zmq".
        "kv_events_zmq_by_default": any(ZMQ_DEFAULT.search(t) for t in events.values()),
        "nixl_side_channel": nixl_side_channel(nixl),
        "nixl_pp": nixl_pp(nixl),
        "nixl_refusals": nixl_parallel_refusals(nixl),
    }


def derive(prover: Prover, versions: list[str] | None = None) -> str:
    """The file's text: every tabled release, or ``versions`` re-read into the committed
    file (so a check of two releases compares exactly what a full run would write)."""
    releases: dict[str, Any] = {}
    if versions and OUTPUT.is_file():
        releases = json.loads(OUTPUT.read_text())["releases"]
    for version in versions or prover.releases("vllm"):
        print(f"reading vLLM {version}", file=sys.stderr)
        releases[version] = read_release(prover, version)
    data = {"generated_by": COMMAND, "releases": dict(sorted(releases.items(), key=_order))}
    return json.dumps(data, indent=1, ensure_ascii=False) + "\n"


def _order(item: tuple[str, Any]) -> Version:
    return Version(item[0])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only compare, do not write")
    parser.add_argument("--versions", nargs="+", help="re-read only these releases")
    parser.add_argument("--cache-dir", type=Path, help="wheel cache (default: the prover's)")
    args = parser.parse_args(argv)
    text = derive(Prover(cache_dir=args.cache_dir), args.versions)
    status = write_or_check({OUTPUT: text}, COMMAND, check=args.check)
    if args.check and status == 0:
        print("constraints: no drift", file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
