"""Start-up constraints of the KV connectors per release, as ``scripts/gen_constraints.py``
read them from the wheels (``rules/audit/constraints.json``): default ports and how each
worker offsets them, and NixlConnector's refusals for pipeline parallelism; and the API
server's default port (``rules/audit/listen_ports.json``, ``scripts/gen_listen_ports.py``)."""

from __future__ import annotations

import json
from functools import cache
from typing import TypeVar

import msgspec

from kvtool.errors import KvtoolError
from kvtool.resources import rules_dir

CONSTRAINTS_FILE = "audit/constraints.json"
LISTEN_PORTS_FILE = "audit/listen_ports.json"
_T = TypeVar("_T")


class PpRefusal(msgspec.Struct, frozen=True):
    """A ``raise`` in NixlConnector's code under conditions that include PP > 1."""

    file: str
    conditions: tuple[str, ...]
    message: str


class NixlPipeline(msgspec.Struct, frozen=True):
    pp_aware: bool  # the NIXL code reads the pipeline-parallel size at all
    refusals: tuple[PpRefusal, ...]


class ParallelRefusal(msgspec.Struct, frozen=True):
    """A ``raise`` in a NIXL class under conditions naming context/data/expert parallelism."""

    file: str
    cls: str  # the class whose method raises it
    conditions: tuple[str, ...]
    message: str


class ReleaseConstraints(msgspec.Struct, frozen=True):
    wheel: str
    sha256: str
    env_ports: dict[str, int]  # VLLM_*PORT -> default (0: no fixed default)
    env_hosts: dict[str, str]  # VLLM_*HOST -> literal default
    nixl_advertises_side_channel_host: bool  # the host goes to the router as remote_host
    kv_events_endpoint: str | None
    kv_events_zmq_by_default: bool
    nixl_side_channel: str | None  # "per_tp_rank" or "per_dp_rank"
    nixl_pp: NixlPipeline
    nixl_refusals: tuple[ParallelRefusal, ...]


class _ConstraintsFile(msgspec.Struct, frozen=True):
    releases: dict[str, ReleaseConstraints]


class ReleaseListenPorts(msgspec.Struct, frozen=True):
    wheel: str
    sha256: str
    api_server_port: int | None  # the default of `vllm serve --port`
    read_from: tuple[str, ...]


class LmcacheListenPorts(msgspec.Struct, frozen=True):
    wheel: str
    sha256: str
    internal_api_server_port_start: int | None  # scheduler's port; worker i: + 1 + i


class _ListenPortsFile(msgspec.Struct, frozen=True):
    releases: dict[str, ReleaseListenPorts]
    lmcache: dict[str, LmcacheListenPorts]


def _load(name: str, kind: type[_T]) -> _T:
    path = rules_dir() / name
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return msgspec.convert(data, type=kind)
    except (OSError, ValueError, msgspec.ValidationError) as exc:
        raise KvtoolError(f"data table {path} is missing or malformed: {exc}") from exc


@cache
def _all() -> dict[str, ReleaseConstraints]:
    return _load(CONSTRAINTS_FILE, _ConstraintsFile).releases


@cache
def _listen_ports_file() -> _ListenPortsFile:
    return _load(LISTEN_PORTS_FILE, _ListenPortsFile)


def _listen_ports() -> dict[str, ReleaseListenPorts]:
    return _listen_ports_file().releases


def constraints_at(version: str) -> ReleaseConstraints | None:
    """What the wheel of ``version`` says (None for a release that was not read)."""
    return _all().get(version)


def api_server_port_at(version: str) -> int | None:
    """The default ``--port`` of ``vllm serve`` at ``version`` (None: not read)."""
    ports = _listen_ports().get(version)
    return ports.api_server_port if ports is not None else None


def lmcache_api_port_start_at(version: str | None) -> int | None:
    """The default first port of LMCache's internal API servers at LMCache ``version``;
    with no version, the default every release that has one agrees on (else None)."""
    table = _listen_ports_file().lmcache
    if version is not None:
        row = table.get(version)
        return row.internal_api_server_port_start if row is not None else None
    found = {r.internal_api_server_port_start for r in table.values()} - {None}
    return found.pop() if len(found) == 1 else None
