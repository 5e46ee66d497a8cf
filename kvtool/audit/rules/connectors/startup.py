"""CN060, CN061, CN063, CN067: start-up constraints of the connectors read from the wheels
(listeners that collide in one pod or, with hostNetwork, on one node; NixlConnector with
pipeline parallelism; a side-channel host nobody else can reach).

The facts per release come from :mod:`kvtool.audit.rules._constraints`
(``scripts/gen_constraints.py``, ``scripts/gen_listen_ports.py``); the rules only place
this invocation's workers on them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from kvtool.audit.context import KV_TRANSFER_CONFIG, RuleContext
from kvtool.audit.inputs.command_line import API_SERVER_MODULE
from kvtool.audit.model import Finding, Fix, Location, PodContainer, Severity
from kvtool.audit.references import Reference, vllm_issue, vllm_source
from kvtool.audit.registry import ConfigRule, register
from kvtool.audit.rules._constraints import (
    ReleaseConstraints,
    api_server_port_at,
    constraints_at,
    lmcache_api_port_start_at,
)
from kvtool.audit.rules.disagg import (
    SIDECAR_LISTEN_DEFAULT,
    SIDECAR_LISTEN_FLAG,
    SIDECAR_MAIN,
    flag_value,
    is_routing_sidecar,
)
from kvtool.audit.rules.podmem import LMCACHE_IN_PROCESS, lmcache_setting

KV_EVENTS_CONFIG = "--kv-events-config"
NIXL_PORT_ENV = "VLLM_NIXL_SIDE_CHANNEL_PORT"
MOONCAKE_PORT_ENV = "VLLM_MOONCAKE_BOOTSTRAP_PORT"
P2P_PORT_ENV = "VLLM_P2P_SIDE_CHANNEL_PORT"
API_PORT_FLAG = "--port"
_TRUE = frozenset({"1", "true", "yes", "on"})
# Connectors and tiers that bind a port from an environment variable's default.
_PORT_OWNERS = {
    "VLLM_NIXL_SIDE_CHANNEL_PORT": "NixlConnector's side channel",
    "VLLM_MOONCAKE_BOOTSTRAP_PORT": "MooncakeConnector's bootstrap server",
    "VLLM_P2P_SIDE_CHANNEL_PORT": "the p2p tier's side channel",
}
# A ZMQ endpoint binds (rather than connects) when its host is a wildcard.
_BIND_HOSTS = ("*", "0.0.0.0")


def _local_dp(ctx: RuleContext) -> int:
    """Data-parallel ranks this command starts on its host."""
    total = max(1, ctx.int_option("--data-parallel-size", 1))
    return max(1, ctx.int_option("--data-parallel-size-local", total))


def _env_port(ctx: RuleContext, name: str, facts: ReleaseConstraints) -> int | None:
    raw = ctx.env_value(name)
    if raw is not None:
        return int(raw) if raw.strip().isdigit() else None
    default = facts.env_ports.get(name)
    return default or None


def _kv_events(ctx: RuleContext) -> dict[str, Any]:
    value = ctx.config.json_values.get(KV_EVENTS_CONFIG)
    if value is None:
        opt = ctx.option(KV_EVENTS_CONFIG)
        value = opt.value if opt is not None else None
    return value if isinstance(value, dict) else {}


def _bound_port(endpoint: object) -> int | None:
    if not isinstance(endpoint, str) or not endpoint.startswith("tcp://"):
        return None
    parts = urlsplit(endpoint)
    host = parts.netloc.rsplit(":", 1)[0]
    try:
        port = parts.port
    except ValueError:
        return None
    return port if host in _BIND_HOSTS else None


@dataclass(frozen=True)
class Listener:
    """Ports one component binds in the pod's (or host's) network namespace."""

    owner: str
    ports: tuple[int, ...]
    flag: str | None
    location: Location | None
    engine: bool  # bound by this vLLM process (not a pod mate)


def _port(raw: str | None) -> int | None:
    return int(raw) if raw is not None and raw.strip().isdigit() else None


def _engine_listeners(ctx: RuleContext, facts: ReleaseConstraints) -> Iterator[Listener]:
    """Each component of this vLLM process that binds ports, with the ports."""
    dp = _local_dp(ctx)
    api_default = api_server_port_at(ctx.version)
    api = ctx.option(API_PORT_FLAG)
    api_port = _port(str(api.value)) if api is not None else api_default
    if api_port is not None:
        how = f"`{API_PORT_FLAG} {api_port}`" if api is not None else f"default port {api_port}"
        yield Listener(
            f"the API server ({how})", (api_port,), API_PORT_FLAG,
            api.location if api is not None else None, engine=True,
        )
    names = set(ctx.connector_names)
    where = ctx.connector_location
    if any(n.startswith("Nixl") for n in names) and facts.nixl_side_channel is not None:
        base = _env_port(ctx, NIXL_PORT_ENV, facts)
        if base is not None:
            if facts.nixl_side_channel == "per_tp_rank":
                ports = [base + r * ctx.tp + t for r in range(dp) for t in range(ctx.tp)]
            else:
                ports = [base + r for r in range(dp)]
            yield Listener(_PORT_OWNERS[NIXL_PORT_ENV], tuple(ports), NIXL_PORT_ENV, where, True)
    if "MooncakeConnector" in names:
        port = _env_port(ctx, MOONCAKE_PORT_ENV, facts)
        if port is not None:
            owner = _PORT_OWNERS[MOONCAKE_PORT_ENV]
            yield Listener(owner, (port,), MOONCAKE_PORT_ENV, where, True)
    tiers = ctx.extra_config.get("secondary_tiers")
    if isinstance(tiers, list) and any(
        isinstance(t, dict) and t.get("type") == "p2p" for t in tiers
    ):
        port = _env_port(ctx, P2P_PORT_ENV, facts)
        if port is not None:
            yield Listener(_PORT_OWNERS[P2P_PORT_ENV], (port,), P2P_PORT_ENV, where, True)
    lmcache = _lmcache_api_servers(ctx)
    if lmcache is not None:
        yield lmcache
    events = _kv_events(ctx)
    publisher = events.get("publisher") or ("zmq" if facts.kv_events_zmq_by_default else "null")
    if events.get("enable_kv_cache_events") is True and publisher == "zmq":
        for key, default in (("endpoint", facts.kv_events_endpoint), ("replay_endpoint", None)):
            port = _bound_port(events.get(key, default))
            if port is not None:
                # Each DP rank's publisher offsets the port by its rank.
                yield Listener(
                    f"the KV events publisher's {key}", tuple(port + r for r in range(dp)),
                    KV_EVENTS_CONFIG, ctx.location_of(KV_EVENTS_CONFIG), True,
                )


def _lmcache_api_servers(ctx: RuleContext) -> Listener | None:
    """In-process LMCache's internal API servers, when enabled: the scheduler's on the
    start port and one per TP x PP worker after it (LMCache internal_api_server)."""
    if LMCACHE_IN_PROCESS not in ctx.connector_names:
        return None
    enabled = lmcache_setting(ctx, "internal_api_server_enabled")
    if enabled is None or str(enabled[0]).strip().lower() not in _TRUE:
        return None
    given = lmcache_setting(ctx, "internal_api_server_port_start")
    start = (
        _port(str(given[0])) if given is not None
        else lmcache_api_port_start_at(ctx.lmcache_version)
    )
    if start is None:
        return None
    return Listener(
        "LMCache's internal API servers", tuple(start + i for i in range(ctx.world + 1)),
        (given or enabled)[1], (given or enabled)[2], True,
    )


def _runs_vllm_server(container: PodContainer) -> bool:
    words = [t.text for t in container.argv]
    return any(
        (w.rsplit("/", 1)[-1] == "vllm" and i + 1 < len(words) and words[i + 1] == "serve")
        or w == API_SERVER_MODULE
        for i, w in enumerate(words)
    )


def _mate_listeners(ctx: RuleContext) -> Iterator[Listener]:
    """Ports the pod's other containers listen on: a routing sidecar's `-port` (or its
    default), another vLLM server's `--port` (or this release's default), any other
    container's explicit `--port`, and every declared `containerPort`."""
    for mate in ctx.config.invocation.pod_containers:
        ports: set[int] = set(mate.ports)
        given = flag_value(mate, (SIDECAR_LISTEN_FLAG,))
        explicit = _port(given[0]) if given is not None else None
        if explicit is not None:
            ports.add(explicit)
        elif is_routing_sidecar(mate):
            ports.add(SIDECAR_LISTEN_DEFAULT)
        elif _runs_vllm_server(mate) and (default := api_server_port_at(ctx.version)):
            ports.add(default)
        if ports:
            location = given[1] if given is not None else mate.location
            yield Listener(f"container `{mate.name}`", tuple(sorted(ports)), None, location, False)


@register
class DefaultPortCollision(ConfigRule):
    """Reports two listeners in one pod (or one vLLM process) on the same port.

    What
    ----
    The engine's listeners - its API server (`--port`, or the release's default),
    NixlConnector's side channel (`VLLM_NIXL_SIDE_CHANNEL_PORT`, offset per DP rank and, on
    early releases, per TP rank), MooncakeConnector's bootstrap server, the p2p tier's side
    channel, the ZMQ KV events publisher (`--kv-events-config` `endpoint`, offset per
    DP rank), in-process LMCache's internal API servers (when enabled: the start port and
    one per worker) - and the pod's other containers (a routing sidecar's `-port`, another vLLM
    server's `--port`, any container's explicit `--port` or declared `containerPort`, a
    metrics exporter's among them) share one network namespace, and two of them, one of
    them the engine's, land on the same port.

    Why
    ---
    The second bind fails (`Address already in use`) and that component does not start.
    Defaults collide without anyone choosing a port: in 0.10.2 and 0.11.0 the NIXL side
    channel and the KV events publisher both default to 5557, and llm-d's routing sidecar
    listens on 8000, `vllm serve`'s default.

    Example
    -------
    `--kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'
    --kv-events-config '{"enable_kv_cache_events":true,"publisher":"zmq"}'` on 0.10.2.

    Fix
    ---
    Move one of them: set `VLLM_NIXL_SIDE_CHANNEL_PORT` (or the other component's variable),
    the publisher's `endpoint`, or the engine's `--port` to a free port.

    Releases
    --------
    Defaults and offsets read from each release's wheel: `scripts/gen_constraints.py`
    (`rules/audit/constraints.json`: `env_ports`, `kv_events_endpoint`,
    `nixl_side_channel`) and `scripts/gen_listen_ports.py` (`rules/audit/listen_ports.json`:
    the `--port` default per vLLM release, LMCache's internal API start port per LMCache
    release). The routing sidecar's default port is llm-d's (pd-sidecar
    `main.go`). Not checked for a release that was not read.
    """

    code = "CN060"
    name = "default-port-collision"
    default_severity = Severity.error
    summary = "two listeners in one pod bind the same port: the second fails to start"
    fix_applicability = "display"
    references = (
        vllm_source("0.10.2", "vllm/envs.py", "VLLM_NIXL_SIDE_CHANNEL_PORT defaults to 5557"),
        vllm_source("0.10.2", "vllm/config/kv_events.py", "KVEventsConfig.endpoint: tcp://*:5557"),
        vllm_source(
            "0.11.1", "vllm/envs.py", "VLLM_NIXL_SIDE_CHANNEL_PORT defaults to 5600 from 0.11.1"
        ),
        vllm_source(
            "0.32.0", "vllm/entrypoints/launchers/cli_args.py", "`vllm serve --port`: 8000"
        ),
        Reference(SIDECAR_MAIN, "llm-d pd-sidecar: -port 8000 (its listener), -vllm-port 8001"),
    )
    since = "0.3.0"

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        facts = constraints_at(ctx.version)
        if facts is None:
            return
        owner_of: dict[int, Listener] = {}
        for listener in [*_engine_listeners(ctx, facts), *_mate_listeners(ctx)]:
            for port in listener.ports:
                first = owner_of.setdefault(port, listener)
                if first is listener or not (first.engine or listener.engine):
                    continue
                mine = first if first.engine else listener
                yield self.finding(
                    f"{first.owner} and {listener.owner} both bind port {port} in one "
                    f"network namespace (vLLM {ctx.version}): the second fails at start-up "
                    "with `Address already in use`.",
                    flag=mine.flag,
                    location=mine.location or listener.location,
                    fix=Fix(
                        applicability="display",
                        description=f"move {listener.owner} or {first.owner} to a free port",
                    ),
                    port=port,
                )
                return


# The one refusal term kvtool evaluates besides PP > 1: the role of this instance.
_CONSUMER_TERM = '.kv_role == "kv_consumer"'
_PP_WORDS = ("pp_size", "pipeline_parallel_size")


def _applies(conditions: tuple[str, ...], ctx: RuleContext) -> bool:
    """Whether every term of a refusal's conditions holds here (PP > 1 is given); a term
    kvtool cannot evaluate (the model's KV layout: HMA, Mamba) makes it False."""
    role = ctx.kv_transfer_config.get("kv_role")
    for condition in conditions:
        for term in condition.split(" and "):
            if any(word in term for word in _PP_WORDS):
                continue
            if not (term.strip().endswith(_CONSUMER_TERM) and role == "kv_consumer"):
                return False
    return True


@register
class NixlPipelineParallel(ConfigRule):
    """Reports NixlConnector with `--pipeline-parallel-size` above 1 where it cannot work.

    What
    ----
    NixlConnector (alone or as a MultiConnector child) on a deployment with PP > 1, on a
    release whose NIXL code has no notion of pipeline parallelism, or whose NIXL worker
    refuses this combination at start-up (a decode-side `kv_consumer` with PP > 1).

    Why
    ---
    Before 0.26.0 the NIXL worker registers and hands shake as if the whole model were on
    one stage: PP stages sharing a TP rank register the same device and the transfer or
    handshake fails (vLLM#22430, #40674). From 0.26.0 the worker raises
    `NotImplementedError` for the combinations its code names, quoted in the message.

    Example
    -------
    `--pipeline-parallel-size 2 --kv-transfer-config
    '{"kv_connector":"NixlConnector","kv_role":"kv_producer"}'` on 0.25.1, or the same with
    `"kv_role":"kv_consumer"` on 0.32.0.

    Fix
    ---
    Use tensor parallelism on the NIXL side (`--pipeline-parallel-size 1`), or a release
    and role the message names as supported.

    Releases
    --------
    Read from each release's NIXL sources by `scripts/gen_constraints.py`
    (`rules/audit/constraints.json`: `nixl_pp.pp_aware` and the refusals with their
    conditions). Refusals that depend on the model's KV layout (HMA, Mamba) are not
    reported.
    """

    code = "CN061"
    name = "nixl-pipeline-parallel"
    default_severity = Severity.error
    summary = "NixlConnector with pipeline parallelism where the release cannot run it"
    fix_applicability = "display"
    references = (
        vllm_issue(22430, "PP + P/D with NixlConnector fails"),
        vllm_issue(40674, "NixlConnector does not support pipeline-parallel-size > 1"),
        vllm_source(
            "0.32.0",
            "vllm/distributed/kv_transfer/kv_connector/v1/nixl/base_worker.py",
            "the NIXL worker's PP > 1 refusals at 0.32.0",
        ),
    )
    since = "0.3.0"

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        if ctx.pp == 1 or not any(n.startswith("Nixl") for n in ctx.connector_names):
            return
        facts = constraints_at(ctx.version)
        if facts is None:
            return
        location = ctx.location_of("--pipeline-parallel-size") or ctx.location_of(
            KV_TRANSFER_CONFIG
        )
        fix = Fix(applicability="display", description="run the NIXL side with PP 1")
        if not facts.nixl_pp.pp_aware:
            yield self.finding(
                f"NixlConnector in vLLM {ctx.version} has no pipeline-parallel support: with "
                f"`--pipeline-parallel-size {ctx.pp}` its stages register and hand shake as "
                "one model and the KV transfer fails.",
                flag="--pipeline-parallel-size",
                location=location,
                fix=fix,
            )
            return
        for refusal in facts.nixl_pp.refusals:
            if _applies(refusal.conditions, ctx):
                yield self.finding(
                    f"vLLM {ctx.version} refuses NixlConnector here at start-up: "
                    f"`NotImplementedError: {refusal.message}`",
                    flag="--pipeline-parallel-size",
                    location=location,
                    fix=fix,
                )
                return


NIXL_HOST_ENV = "VLLM_NIXL_SIDE_CHANNEL_HOST"
_LOOPBACK = ("localhost", "127.0.0.1", "::1")
_WILDCARDS = ("0.0.0.0", "::", "*")
# Inputs where the engine runs in a pod or a compose service, not on a host it shares.
_POD_INPUTS = ("kubernetes", "kaito", "compose")
# Roles whose kv_transfer_params another instance reads (kv_both: llm-d's P/D pods).
_ADVERTISING_ROLES = ("kv_producer", "kv_both")


@register
class NixlSideChannelHostLoopback(ConfigRule):
    """Reports a NIXL prefill engine in a pod that advertises a loopback side-channel host.

    What
    ----
    A containerised engine (Kubernetes, KAITO or Compose input) loads NixlConnector with
    `kv_role` `kv_producer` or `kv_both`, and `VLLM_NIXL_SIDE_CHANNEL_HOST` is not set, so
    it keeps the release's default, `localhost`, or is set to a loopback or wildcard
    address (`127.0.0.1`, `0.0.0.0`, `::`).

    Why
    ---
    NixlConnector hands its side-channel host to the router in `kv_transfer_params`
    (`remote_host`), and the decode engine connects there for the NIXL handshake. From
    another pod `localhost` is the decode pod itself, and a wildcard such as `0.0.0.0`
    (set as if it were only the listener's bind address: NixlConnector binds there too)
    is no address to connect to: the handshake times out and every request falls back to
    a full prefill, or fails. llm-d's pods set the variable to the
    pod's IP (`fieldRef: status.podIP`).

    Example
    -------
    A Deployment running `vllm serve m --kv-transfer-config
    '{"kv_connector":"NixlConnector","kv_role":"kv_producer"}'` with no
    `VLLM_NIXL_SIDE_CHANNEL_HOST`.

    Fix
    ---
    Set `VLLM_NIXL_SIDE_CHANNEL_HOST` to an address the decode pods reach (the pod IP from
    the downward API, `valueFrom: {fieldRef: {fieldPath: status.podIP}}`).

    Releases
    --------
    The default and that NixlConnector advertises it, read from each release's wheel by
    `scripts/gen_constraints.py` (`env_hosts`, `nixl_advertises_side_channel_host`). A
    router that rewrites `remote_host` makes this harmless: a warning.
    """

    code = "CN063"
    name = "nixl-side-channel-host-loopback"
    default_severity = Severity.warning
    summary = "a NIXL prefill pod advertises a loopback or wildcard side-channel host"
    fix_applicability = "display"
    references = (
        vllm_source("0.32.0", "vllm/envs.py", "VLLM_NIXL_SIDE_CHANNEL_HOST defaults to localhost"),
        vllm_source(
            "0.32.0",
            "vllm/distributed/kv_transfer/kv_connector/v1/nixl/pull_scheduler.py",
            "request_finished puts remote_host=side_channel_host into kv_transfer_params",
        ),
    )
    since = "0.3.0"

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        if ctx.config.invocation.kind not in _POD_INPUTS:
            return
        if not any(n.startswith("Nixl") for n in ctx.connector_names):
            return
        if ctx.kv_transfer_config.get("kv_role") not in _ADVERTISING_ROLES:
            return
        facts = constraints_at(ctx.version)
        if facts is None or not facts.nixl_advertises_side_channel_host:
            return
        given = ctx.env(NIXL_HOST_ENV)
        if given is not None and given.value is None:
            return  # valueFrom (the downward API's pod IP) or another variable
        host = given.value if given is not None else facts.env_hosts.get(NIXL_HOST_ENV)
        if host is None or host.strip().strip("[]") not in (*_LOOPBACK, *_WILDCARDS):
            return
        how = (
            f"`{NIXL_HOST_ENV}={host}`"
            if given is not None
            else f"`{host}` (the default of `{NIXL_HOST_ENV}` in vLLM {ctx.version})"
        )
        what = (
            "a wildcard is a bind address, not one a peer can connect to"
            if host.strip().strip("[]") in _WILDCARDS
            else "from another pod that is the decode pod itself"
        )
        yield self.finding(
            f"NixlConnector binds its side channel on and advertises {how} as `remote_host`: "
            f"{what}, so the decode engine's NIXL handshake fails, unless the router "
            "rewrites `remote_host`.",
            flag=NIXL_HOST_ENV,
            location=given.location if given is not None else ctx.connector_location,
            fix=Fix(
                applicability="display",
                description=f"set {NIXL_HOST_ENV} to the pod IP (fieldRef: status.podIP)",
            ),
        )


def _host_network_location(ctx: RuleContext) -> Location | None:
    resources = ctx.config.invocation.resources
    return resources.host_network if resources is not None else None


def _host_network(ctx: RuleContext) -> bool:
    return _host_network_location(ctx) is not None


@register
class HostNetworkPortCollision(ConfigRule):
    """Reports engines of one file, all on the node's network, that listen on one port.

    What
    ----
    This engine's pod sets `hostNetwork: true`, and another engine in the same input file
    does too, and one of this engine's listeners (its API server `--port`, the NIXL side
    channel, Mooncake's bootstrap server, the p2p side channel, the KV events publisher,
    with each release's defaults and per-rank offsets) is on a port one of the other's
    is on.

    Why
    ---
    With host networking every pod on a node shares the node's ports: when the scheduler
    puts both engines on one node (a prefill and a decode on an 8-GPU node, two replicas),
    the second one's bind fails (`Address already in use`) and it does not start. It
    depends on placement, so a warning.

    Example
    -------
    A prefill and a decode Deployment in one file, both `hostNetwork: true`, both
    `vllm serve m --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'`
    with the default `--port` and `VLLM_NIXL_SIDE_CHANNEL_PORT`.

    Fix
    ---
    Give each engine its own `--port` and `VLLM_NIXL_SIDE_CHANNEL_PORT` range (and the
    other listeners' ports), or drop `hostNetwork`.

    Releases
    --------
    Defaults as CN060 reads them from the wheels (`rules/audit/constraints.json`,
    `rules/audit/listen_ports.json`).
    """

    code = "CN067"
    name = "host-network-port-collision"
    default_severity = Severity.warning
    summary = "two hostNetwork engines of one file listen on the same port of their node"
    fix_applicability = "display"
    references = (
        Reference(
            "https://kubernetes.io/docs/concepts/security/pod-security-standards/",
            "Kubernetes: hostNetwork shares the node's network namespace (and its ports)",
        ),
        vllm_source("0.32.0", "vllm/envs.py", "VLLM_NIXL_SIDE_CHANNEL_PORT's default"),
    )
    since = "0.3.0"

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        facts = constraints_at(ctx.version)
        if facts is None or not _host_network(ctx):
            return
        mine = list(_engine_listeners(ctx, facts))
        for other in ctx.siblings:
            other_facts = constraints_at(other.version)
            if other_facts is None or not _host_network(other):
                continue
            listeners = _engine_listeners(other, other_facts)
            theirs = {port: owned for owned in listeners for port in owned.ports}
            for listener in mine:
                shared = sorted(set(listener.ports) & set(theirs))
                if not shared:
                    continue
                yield self.finding(
                    f"{listener.owner} here and {theirs[shared[0]].owner} of "
                    f"{other.config.invocation.label} both bind port {shared[0]} with "
                    "`hostNetwork: true`: on one node the second fails to start "
                    "(`Address already in use`).",
                    flag=listener.flag,
                    location=listener.location or _host_network_location(ctx),
                    fix=Fix(applicability="display", description="give each engine its own ports"),
                    port=shared[0],
                    other=other.config.invocation.label,
                )
                return
