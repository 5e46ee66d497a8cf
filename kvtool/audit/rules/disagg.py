"""CN050-CN051, CN064-CN065: the parts of a prefill/decode deployment must agree: the engines of a
pair defined in one input file, and a routing sidecar with the engine in its pod (the
protocol it speaks, the port it forwards to), and NIXL engines that must be told apart."""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from kvtool.audit.context import KV_TRANSFER_CONFIG, RuleContext
from kvtool.audit.model import Finding, Fix, Location, PodContainer, Severity
from kvtool.audit.references import Reference, vllm_source
from kvtool.audit.registry import ConfigRule, register
from kvtool.audit.rules._constraints import api_server_port_at
from kvtool.audit.rules._premises import capped, premise

PD_ROLES = ("kv_producer", "kv_consumer")
_OPPOSITE = {"kv_producer": "kv_consumer", "kv_consumer": "kv_producer"}


def _role(ctx: RuleContext) -> str | None:
    if ctx.connector is None or ctx.connector.via != "kv-transfer-config":
        return None
    role = ctx.kv_transfer_config.get("kv_role")
    return role if isinstance(role, str) else None


@register
class DisaggregatedPairInconsistent(ConfigRule):
    """Reports an engine that cannot take part in the prefill/decode pair it is defined with.

    What
    ----
    Other engines in the same input file (a manifest or compose file) are a disaggregated
    pair (`kv_role` `kv_producer` / `kv_consumer`), and this engine either has no KV
    connector at all, or has the opposite role with a connector none of theirs can talk to.

    Why
    ---
    KV moves between prefill and decode only through a connector both sides load: a decode
    engine without one recomputes every prompt (or the router's P/D hand-off fails), and a
    producer and a consumer with different connectors never exchange a block.

    Example
    -------
    A prefill Deployment with `{"kv_connector":"NixlConnector","kv_role":"kv_producer"}` and a
    decode Deployment in the same file with no `--kv-transfer-config`.

    Fix
    ---
    Give every engine of the pair the same connector with consistent roles.

    Releases
    --------
    Every release.
    """

    code = "CN050"
    name = "disaggregated-pair-inconsistent"
    default_severity = Severity.error
    summary = "an engine of a prefill/decode pair without a connector both sides load"
    references = (
        vllm_source(
            "0.32.0",
            "vllm/config/kv_transfer.py",
            "KVTransferConfig at 0.32.0: kv_role and the connector a P/D pair names",
        ),
        Reference(
            "https://docs.vllm.ai/en/latest/features/disagg_prefill.html",
            "vLLM docs: disaggregated prefilling, both engines carry a KV connector",
        ),
    )
    since = "0.2.0"

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        partners = [s for s in ctx.siblings if _role(s) in PD_ROLES]
        if not partners:
            return
        labels = ", ".join(s.config.invocation.label for s in partners)
        if ctx.connector is None:
            yield self.finding(
                f"This engine has no KV connector, but {labels} in the same file "
                f"{'is' if len(partners) == 1 else 'are'} a prefill/decode pair: no KV "
                "reaches or leaves this engine.",
                flag=KV_TRANSFER_CONFIG,
                partners=[s.config.invocation.label for s in partners],
            )
            return
        role = _role(ctx)
        if role not in PD_ROLES:
            return
        opposite = [s for s in partners if _role(s) == _OPPOSITE[role]]
        mine = set(ctx.connector_names)
        strangers = [s for s in opposite if not mine & set(s.connector_names)]
        if opposite and len(strangers) == len(opposite):
            theirs = sorted({n for s in strangers for n in s.connector_names})
            yield self.finding(
                f"This {role} loads `{', '.join(sorted(mine))}` but its "
                f"{_OPPOSITE[role]} partner(s) ({labels}) load `{', '.join(theirs)}`: the "
                "pair shares no connector, so no KV is exchanged.",
                flag=KV_TRANSFER_CONFIG,
                location=ctx.connector_location,
            )


# llm-d's P/D routing sidecar: the llm-d-routing-sidecar repository, then `pd-sidecar` in
# llm-d-inference-scheduler (image llm-d-routing-sidecar), then llm-d-router's
# llm-d-router-disagg-sidecar. Recognised by image or by the binary a command runs.
SIDECAR_PROGRAMS = frozenset(
    {"llm-d-routing-sidecar", "pd-sidecar", "llm-d-router-disagg-sidecar"}
)
# `-connector` (llm-d-routing-sidecar, pd-sidecar) became `-kv-connector`; both default to
# nixlv2. Go's flag package takes one or two dashes, `=value` or the next word.
SIDECAR_CONNECTOR_FLAGS = ("connector", "kv-connector")
SIDECAR_DEFAULT_CONNECTOR = "nixlv2"
# The sidecar listens on `-port` and forwards the decode request to the engine on
# localhost:`-vllm-port` (pd-sidecar main.go: defaults "8000" and "8001").
SIDECAR_LISTEN_FLAG = "port"
SIDECAR_LISTEN_DEFAULT = 8000
SIDECAR_TARGET_FLAG = "vllm-port"
SIDECAR_TARGET_DEFAULT = 8001
NIXL_PROTOCOLS = frozenset({"nixl", "nixlv2"})
NIXL_CONNECTOR = "NixlConnector"
SIDECAR_MAIN = (
    "https://github.com/llm-d/llm-d-inference-scheduler/blob/"
    "10df70b25e8339f5dc31bb97483ed63773c49750/cmd/pd-sidecar/main.go"
)
_SIDECAR_NIXLV2 = (
    "https://github.com/llm-d/llm-d-inference-scheduler/blob/"
    "05399b3df7c213f21a28cc7631b6f2382ed56da6/pkg/sidecar/proxy/connector_nixlv2.go"
)


class SidecarProtocol(msgspec.Struct, frozen=True):
    """The P/D protocol a routing sidecar speaks, and where it was chosen."""

    container: PodContainer
    protocol: str
    location: Location | None


def _program(word: str) -> str:
    """``ghcr.io/llm-d/llm-d-routing-sidecar:v0.3.0`` or ``/app/pd-sidecar`` -> the name."""
    return word.split("@", 1)[0].rsplit("/", 1)[-1].split(":", 1)[0]


def flag_value(
    container: PodContainer, names: Iterable[str]
) -> tuple[str, Location | None] | None:
    """The value of the first of ``names`` in the container's words (``-name v``,
    ``--name=v``: Go's flag package and argparse alike), with where it was written."""
    wanted = set(names)
    words = container.argv
    for index, token in enumerate(words):
        name, eq, value = token.text.lstrip("-").partition("=")
        if not token.text.startswith("-") or name not in wanted:
            continue
        if not eq and index + 1 < len(words):
            value = words[index + 1].text
        return value, token.location
    return None


def is_routing_sidecar(container: PodContainer) -> bool:
    """``container`` runs llm-d's routing sidecar (by image or by the program it runs)."""
    first = container.argv[0].text if container.argv else ""
    return (
        _program(container.image or "") in SIDECAR_PROGRAMS
        or _program(first) in SIDECAR_PROGRAMS
    )


def routing_sidecar(container: PodContainer) -> SidecarProtocol | None:
    """The protocol ``container`` speaks when it is llm-d's routing sidecar, else None."""
    if not is_routing_sidecar(container):
        return None
    given = flag_value(container, SIDECAR_CONNECTOR_FLAGS)
    if given is not None:
        return SidecarProtocol(container, given[0], given[1])
    return SidecarProtocol(container, SIDECAR_DEFAULT_CONNECTOR, container.location)


@register
class RoutingSidecarWithoutNixl(ConfigRule):
    """Reports a routing sidecar that speaks NIXL next to an engine without NixlConnector.

    What
    ----
    The engine's pod also runs llm-d's P/D routing sidecar (`llm-d-routing-sidecar`,
    `pd-sidecar`, `llm-d-router-disagg-sidecar`) with `--connector` / `--kv-connector`
    `nixlv2` or `nixl` (the sidecar's default when neither is given), and the engine loads
    no `NixlConnector` (alone or as a MultiConnector child).

    Why
    ---
    The sidecar sends the prompt to a prefill pod with `kv_transfer_params`
    (`do_remote_decode`), then hands this engine the prefill's `kv_transfer_params` so that
    NixlConnector pulls the KV blocks. Without NixlConnector nothing reads them: every
    request is prefilled twice, and the prefill pod holds the blocks it was asked to keep
    for a remote reader until its abort timeout.

    Example
    -------
    A decode Deployment with an init container `llm-d-routing-sidecar` (`--connector=nixlv2`,
    `restartPolicy: Always`) and `vllm serve` with `--kv-offloading-backend native` only.

    Fix
    ---
    Give the engine `{"kv_connector":"NixlConnector","kv_role":"kv_both"}` (or a
    MultiConnector with a NixlConnector child), or run the sidecar with the connector the
    engines share (`lmcache`, `shared-storage`).

    Releases
    --------
    Every release. Engines whose connector is loaded by `kv_connector_module_path` are not
    checked.
    """

    code = "CN051"
    name = "routing-sidecar-without-nixl"
    default_severity = Severity.error
    summary = "routing sidecar speaks NIXL but the engine in its pod loads no NixlConnector"
    references = (
        Reference(SIDECAR_MAIN, "llm-d pd-sidecar flags: --kv-connector, default nixlv2"),
        Reference(_SIDECAR_NIXLV2, "llm-d pd-sidecar NIXL v2 protocol: kv_transfer_params"),
        Reference(
            "https://github.com/llm-d/llm-d-routing-sidecar",
            "llm-d-routing-sidecar: decode vLLM with NixlConnector behind -connector=nixlv2",
        ),
    )
    since = "0.2.0"

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        if NIXL_CONNECTOR in ctx.connector_names or ctx.external_connectors:
            return
        for container in ctx.config.invocation.pod_containers:
            sidecar = routing_sidecar(container)
            if sidecar is None or sidecar.protocol not in NIXL_PROTOCOLS:
                continue
            has = (
                f"loads `{', '.join(ctx.connector_names)}`"
                if ctx.connector_names
                else "has no KV connector"
            )
            yield self.finding(
                f"Routing sidecar `{container.name}` in this pod speaks `{sidecar.protocol}` "
                f"(NIXL) but this engine {has}: the KV the prefill pod computed is never "
                "read here, so every prompt is prefilled twice.",
                flag=KV_TRANSFER_CONFIG,
                location=ctx.connector_location or sidecar.location,
                sidecar=container.name,
                protocol=sidecar.protocol,
            )
            return


@register
class RoutingSidecarTargetPort(ConfigRule):
    """Reports a routing sidecar that forwards to a port the engine in its pod does not serve.

    What
    ----
    The engine's pod runs llm-d's routing sidecar, which forwards every request it
    accepts to `localhost:<-vllm-port>` (default 8001), and the engine listens on another
    port: its `--port`, or `vllm serve`'s default (8000) when none is given.

    Why
    ---
    Nothing answers on the port the sidecar targets: every request routed to this pod
    fails with a connection error while the engine itself is healthy (its readiness probe
    passes on its own port). llm-d's decode pods pair the sidecar's `--vllm-port` with the
    engine's `--port`.

    Example
    -------
    A decode Deployment with the sidecar `llm-d-routing-sidecar --port=8000` (no
    `--vllm-port`) and `vllm serve m --port 8200`.

    Fix
    ---
    Give the sidecar `--vllm-port` equal to the engine's `--port`, or the engine the port
    the sidecar targets.

    Releases
    --------
    Every release; the default of `--port` is read from each release's wheel
    (`scripts/gen_listen_ports.py`), the sidecar's from llm-d's `main.go`.
    """

    code = "CN064"
    name = "routing-sidecar-target-port"
    default_severity = Severity.error
    summary = "the routing sidecar forwards to a port the engine in its pod does not listen on"
    fix_applicability = "display"
    references = (
        Reference(SIDECAR_MAIN, "llm-d pd-sidecar: -vllm-port (default 8001) is the engine's"),
        vllm_source(
            "0.32.0", "vllm/entrypoints/launchers/cli_args.py", "`vllm serve --port`: 8000"
        ),
    )
    since = "0.3.0"

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        opt = ctx.option("--port")
        engine_port = (
            int(str(opt.value)) if opt is not None and str(opt.value).isdigit()
            else api_server_port_at(ctx.version) if opt is None else None
        )
        if engine_port is None:
            return
        for container in ctx.config.invocation.pod_containers:
            if not is_routing_sidecar(container):
                continue
            given = flag_value(container, (SIDECAR_TARGET_FLAG,))
            raw = given[0] if given is not None else str(SIDECAR_TARGET_DEFAULT)
            if not raw.isdigit() or int(raw) == engine_port:
                continue
            said = f"`--{SIDECAR_TARGET_FLAG} {raw}`" if given else f"its default port {raw}"
            engine = f"`--port {engine_port}`" if opt is not None else f"default {engine_port}"
            yield self.finding(
                f"Routing sidecar `{container.name}` forwards requests to localhost ({said}) "
                f"but this engine listens on {engine}: every request routed to this pod "
                "fails to connect.",
                flag="--port",
                location=(opt.location if opt is not None else None)
                or (given[1] if given else container.location),
                fix=Fix(
                    applicability="display",
                    description=f"run the sidecar with --{SIDECAR_TARGET_FLAG}={engine_port}",
                ),
                sidecar=container.name,
                target_port=int(raw),
                engine_port=engine_port,
            )
            return


ENGINE_ID_PREMISE = "nixl.remote_agents_keyed_by_engine_id"


def _explicit_engine_id(ctx: RuleContext) -> str | None:
    if not any(n.startswith("Nixl") for n in ctx.connector_names):
        return None
    value = ctx.kv_transfer_config.get("engine_id")
    return value if isinstance(value, str) and value else None


@register
class NixlEngineIdShared(ConfigRule):
    """Reports NIXL engines of one deployment that are given the same `engine_id`.

    What
    ----
    This engine loads NixlConnector with an explicit `engine_id` in
    `--kv-transfer-config`, and another engine in the same input file (the other half of
    a prefill/decode pair, another prefill) is given the same one.

    Why
    ---
    A decode engine keeps one NIXL peer per remote `engine_id`, and hands shake only with
    an id it has not registered yet. The second engine with that id is taken for the
    first: the decode reads the second's block ids out of the first engine's memory
    (wrong KV served without an error) or its transfers fail. vLLM gives every engine a
    fresh UUID when `engine_id` is not set.

    Example
    -------
    Two prefill Deployments in one file, both with
    `{"kv_connector":"NixlConnector","kv_role":"kv_producer","engine_id":"prefill"}`.

    Fix
    ---
    Drop `engine_id` from `--kv-transfer-config` (vLLM generates a unique one), or give
    each engine its own.

    Releases
    --------
    The premise `nixl.remote_agents_keyed_by_engine_id` (0.9.0 on, proven from the
    wheels: `rules/audit/premises.json`).
    """

    code = "CN065"
    name = "nixl-engine-id-shared"
    default_severity = Severity.error
    summary = "two NIXL engines of one deployment share an explicit engine_id"
    fix_applicability = "display"
    references = (
        vllm_source(
            "0.32.0",
            "vllm/distributed/kv_transfer/kv_connector/v1/nixl/pull_worker.py",
            "a handshake only for a remote engine_id not in _remote_agents",
        ),
        vllm_source(
            "0.32.0", "vllm/config/kv_transfer.py", "engine_id defaults to a fresh uuid4"
        ),
    )
    since = "0.3.0"

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        engine_id = _explicit_engine_id(ctx)
        if engine_id is None:
            return
        verdict = premise(ENGINE_ID_PREMISE, ctx.version)
        if not verdict.holds:
            return
        same = [s for s in ctx.siblings if _explicit_engine_id(s) == engine_id]
        if not same:
            return
        labels = ", ".join(s.config.invocation.label for s in same)
        yield self.finding(
            f"`engine_id` `{engine_id}` is also given to {labels}: a decode engine takes "
            "both for one NIXL peer and reads one engine's blocks from the other's memory "
            "(wrong KV, no error) or fails the transfer." + verdict.note,
            flag=KV_TRANSFER_CONFIG,
            location=ctx.connector_location,
            severity=capped(self.default_severity, verdict),
            fix=Fix(applicability="display", description="remove engine_id (vLLM picks a UUID)"),
            engine_id=engine_id,
        )
