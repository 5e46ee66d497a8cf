"""VG013-VG015: LMCache settings checked against the LMCache releases' own tables.

The names come from ``rules/lmcache/`` (generated from LMCache wheels by
``scripts/gen_lmcache_tables.py``). The serve config does not name the LMCache release,
so a name is wrong when no tabled release reads it.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable

from kvtool import lmcache
from kvtool.audit.context import KV_TRANSFER_CONFIG, RuleContext
from kvtool.audit.model import Finding, PodContainer, Severity
from kvtool.audit.references import (
    LMCACHE_MP_CONNECTOR,
    VLLM_CONFIG_032,
    lmcache_issue,
    lmcache_pr,
    lmcache_source,
    vllm_issue,
    vllm_source,
)
from kvtool.audit.registry import ConfigRule, register
from kvtool.audit.rules._common import closest, did_you_mean

ENV_PREFIX = "LMCACHE_"
LEGACY_PREFIX = "LM_CACHE_"
KEY_PREFIX = "lmcache."
CONFIG_SOURCE = lmcache_source(
    "lmcache/v1/config.py", "LMCache 0.5.6 config: the LMCACHE_* variables and keys it reads"
)


def _tabled() -> str:
    versions = tuple(r.version for r in lmcache.releases())
    return f"LMCache {lmcache.span(versions)}"


@register
class UnknownLmcacheEnvVar(ConfigRule):
    """Reports an `LMCACHE_*` environment variable no LMCache release reads.

    What
    ----
    An environment variable starts with `LMCACHE_` but none of the tabled LMCache releases
    reads it (the config names of `lmcache/v1/config.py`, each read as
    `LMCACHE_<NAME>`, and the variables read directly).

    Why
    ---
    LMCache ignores unknown variables: a typo (`LMCACHE_MAX_LOCAL_CPU_SIZES`) leaves the
    default in force (5 GB of CPU cache), and nothing says so. A variable only older
    releases read (`LMCACHE_USE_EXPERIMENTAL`, last read by 0.3.11) is an info naming
    the releases that read it.

    Example
    -------
    `LMCACHE_MAX_LOCAL_CPU_SIZES=100` next to `LMCacheConnectorV1`.

    Fix
    ---
    Use the suggested name.

    Releases
    --------
    `rules/lmcache/<version>.json`, generated from LMCache's wheels.
    """

    code = "VG013"
    name = "unknown-lmcache-env-var"
    default_severity = Severity.warning
    summary = "LMCACHE_* environment variable that no LMCache release reads"
    references = (CONFIG_SOURCE,)
    since = "0.2.0"
    other_severities = (Severity.info,)  # only older LMCache releases read it

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        names = [n for n in ctx.config.env if n.startswith(ENV_PREFIX)]
        if not names:
            return
        known = lmcache.known("env_vars")
        newest = lmcache.releases()[-1]
        for name in names:
            if name in newest.env_vars:
                continue
            if name in known:  # read by older releases only: say which
                readers = lmcache.releases_with("env_vars", name)
                yield self.finding(
                    f"`{name}` is read only by LMCache {lmcache.span(readers)}; "
                    f"{newest.version} ignores it.",
                    flag=name,
                    location=ctx.config.env[name].location,
                    severity=Severity.info,
                )
                continue
            yield self.finding(
                f"`{name}` is read by no LMCache release ({_tabled()}); it is ignored."
                + did_you_mean(name, known),
                flag=name,
                location=ctx.config.env[name].location,
            )


@register
class LegacyLmcacheEnvName(ConfigRule):
    """Reports an `LM_CACHE_*` environment variable (LMCache reads `LMCACHE_*`).

    What
    ----
    An environment variable is spelt `LM_CACHE_<NAME>`; LMCache's loader builds
    `LMCACHE_<NAME>` from each config name and reads nothing else.

    Why
    ---
    The setting is ignored; the operator believes it is in force.

    Example
    -------
    `LM_CACHE_CHUNK_SIZE=512`.

    Fix
    ---
    Rename it to `LMCACHE_<NAME>`.

    Releases
    --------
    `rules/lmcache/<version>.json`.
    """

    code = "VG014"
    name = "legacy-lmcache-env-name"
    default_severity = Severity.warning
    summary = "LM_CACHE_* environment variable; LMCache reads LMCACHE_*"
    references = (CONFIG_SOURCE,)
    since = "0.2.0"

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        for name, assignment in ctx.config.env.items():
            if not name.startswith(LEGACY_PREFIX):
                continue
            if name in lmcache.known("env_vars"):
                continue  # a release that really read this spelling
            modern = ENV_PREFIX + name[len(LEGACY_PREFIX) :]
            hint = (
                f" use `{modern}`"
                if modern in lmcache.known("env_vars")
                else " no LMCache release reads a matching `LMCACHE_*` name either"
            )
            yield self.finding(
                f"`{name}` is not read by LMCache ({_tabled()}):{hint}.",
                flag=name,
                location=assignment.location,
            )


@register
class UnknownLmcacheExtraConfigKey(ConfigRule):
    """Reports an `lmcache.<name>` extra-config key that is no LMCache config name.

    What
    ----
    `kv_connector_extra_config` of an LMCache connector has an `lmcache.<name>` key
    (outside `lmcache.mp.*`) whose name is no config item of any tabled LMCache release.

    Why
    ---
    LMCache applies `lmcache.*` keys from vLLM's extra config as config overrides and
    skips names it does not know: the override never happens.

    Example
    -------
    `"lmcache.max_local_cpu_sze": 40`.

    Fix
    ---
    Use the suggested key.

    Releases
    --------
    `rules/lmcache/<version>.json`.
    """

    code = "VG015"
    name = "unknown-lmcache-extra-config-key"
    default_severity = Severity.warning
    summary = "lmcache.* extra-config key that is no LMCache config name"
    references = (
        lmcache_source(
            "lmcache/integration/vllm/vllm_v1_adapter.py",
            "LMCache 0.5.6 vLLM adapter: the lmcache.* extra-config keys it reads",
        ),
        CONFIG_SOURCE,
    )
    since = "0.2.0"

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        lmcache_connectors = set(ctx.semantics.lmcache_connectors)
        for connector, extra in ctx.connector_extra_configs:
            if connector not in lmcache_connectors:
                continue
            names = lmcache.known("config_names") | set().union(
                *(r.aliases for r in lmcache.releases())
            )
            for key in extra:
                if not key.startswith(KEY_PREFIX) or key.startswith(KEY_PREFIX + "mp."):
                    continue
                name = key[len(KEY_PREFIX) :]
                if name in names:
                    continue
                match = closest(name, names)
                hint = f" Did you mean `{KEY_PREFIX}{match}`?" if match else ""
                yield self.finding(
                    f"`{key}` names no LMCache config item ({_tabled()}); it is ignored.{hint}",
                    flag=key,
                    location=ctx.location_of(KV_TRANSFER_CONFIG),
                )


PAIR_CONNECTORS = ("LMCacheMPConnector", "LMCacheConnectorV1")


@register
class LmcacheVllmPairDoesNotStart(ConfigRule):
    """Reports an LMCache release whose integration cannot start with the target vLLM.

    What
    ----
    The audit knows which LMCache release runs next to vLLM (`--lmcache-version`,
    `lmcache-version` in the settings file, or what the input shows: a `pip install
    lmcache==X` in the engine's file, the tag of an `lmcache/vllm-openai:vX` image, a
    `lmcache==X` requirements pin in the input set; the message names the source), the
    engine loads `LMCacheMPConnector` or
    `LMCacheConnectorV1`, and that vLLM/LMCache pair is in the generated pair table: an
    import between the two packages names something the other release lacks, or vLLM calls
    an LMCache class with arguments it no longer takes.

    Why
    ---
    The engine dies while constructing the connector: `ImportError: cannot import name
    'cdiv' from 'vllm.utils'` (LMCache 0.3.x on vLLM 0.14+), or `TypeError` from
    `ParallelStrategy(...)` / `LMCacheMPSchedulerAdapter(server_url=...)` when vLLM's own
    MP connector meets a newer LMCache (LMCache#4134 on vLLM 0.19/0.20; the vLLM 0.21.0 +
    LMCache 0.4.7 pair a vllm#42911 comment runs).

    Example
    -------
    `--kv-offloading-backend lmcache` on vLLM 0.20.0 with `--lmcache-version 0.5.6`.

    Fix
    ---
    Install an LMCache release the table does not list for this vLLM release (the message
    names the failing import or call), or change the vLLM release.

    Releases
    --------
    `rules/lmcache/vllm_pairs.json`, generated by `scripts/gen_lmcache_pairs.py` from every
    tabled vLLM and LMCache wheel (sha256 recorded). An LMCache release the table does not
    cover gives one info.
    """

    code = "VG016"
    name = "lmcache-vllm-pair-does-not-start"
    default_severity = Severity.error
    summary = "the LMCache release next to vLLM cannot start this connector with this vLLM"
    references = (
        lmcache_issue(4134, "MP connector variants drifted: ParallelStrategy arity, server_urls"),
        vllm_issue(42911, "LMCache on vLLM 0.19.1/0.21.0; a comment pairs 0.21.0 with 0.4.7"),
        vllm_source(
            "0.20.0",
            "vllm/distributed/kv_transfer/kv_connector/v1/lmcache_mp_connector.py",
            "vLLM 0.20.0's LMCacheMPConnector: ParallelStrategy(...) with 7 arguments",
        ),
        lmcache_source(
            "lmcache/integration/vllm/vllm_multi_process_adapter.py",
            "LMCache 0.5.6 MP adapter: ParallelStrategy fields and adapter parameters",
        ),
    )
    since = "0.2.0"
    other_severities = (Severity.info,)  # the LMCache release is not tabled

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        wanted = ctx.lmcache_version
        used = [name for name in PAIR_CONNECTORS if name in ctx.connector_names]
        if wanted is None or not used:
            return
        version = wanted.removeprefix("v")
        table = lmcache.vllm_pairs()
        if ctx.version not in table.vllm_wheels:
            return  # a vLLM release the generator did not read
        if version not in table.lmcache_wheels:
            yield self.finding(
                f"LMCache {wanted}{_from(ctx)} is not in the pair table (LMCache "
                f"{lmcache.span(tuple(table.lmcache_wheels))}): whether it starts with vLLM "
                f"{ctx.version} was not checked.",
                location=ctx.connector_location,
                severity=Severity.info,
            )
            return
        for connector in used:
            if connector == "LMCacheConnectorV1" and _uses_native_adapter(ctx):
                continue  # vLLM's own copy of the adapter, not LMCache's
            problem = lmcache.pair_problem(ctx.version, version, connector)
            if problem is None:
                continue
            yield self.finding(
                f"`{connector}` cannot start with LMCache {version}{_from(ctx)} on vLLM "
                f"{ctx.version}: {problem.reason} (at {problem.where}).",
                flag=KV_TRANSFER_CONFIG,
                location=ctx.connector_location,
                connector=connector,
                lmcache=version,
                where=problem.where,
            )


def _from(ctx: RuleContext) -> str:
    """Where the LMCache release was read, for messages: `` (from image tag ...)``."""
    return f" (from {ctx.lmcache_origin})" if ctx.lmcache_origin else ""


def _uses_native_adapter(ctx: RuleContext) -> bool:
    """``use_native`` in LMCacheConnectorV1's extra config selects vLLM's bundled adapter."""
    return any(
        name == "LMCacheConnectorV1" and extra.get("use_native") is True
        for name, extra in ctx.connector_extra_configs
    )


MP_CONNECTOR = "LMCacheMPConnector"
AUTOSTART = "lmcache.mp.autostart"
CONTAINER_INPUTS = ("kubernetes", "kaito", "compose")


MP_SERVER_MODULE = "lmcache.v1.multiprocess.server"


def _runs_mp_server(container: PodContainer) -> bool:
    """True when a pod container starts LMCache's MP server: `lmcache server ...` or
    `python -m lmcache.v1.multiprocess.server ...`, directly or inside a `sh -c` script."""
    words = [token.text for token in container.argv]
    if any(MP_SERVER_MODULE in word for word in words):
        return True
    for first, second in itertools.pairwise(words):
        if first.rsplit("/", 1)[-1] == "lmcache" and second == "server":
            return True
    return any(re.search(r"(^|[\s/])lmcache\s+server\b", word) for word in words)


@register
class LmcacheMpServerNotStarted(ConfigRule):
    """Notes that LMCacheMPConnector needs an LMCache server reachable from the engine's pod.

    What
    ----
    A containerised engine (Kubernetes, KAITO or Compose input) loads `LMCacheMPConnector`,
    does not ask the connector to start the server (`lmcache.mp.autostart`), names no
    server (`lmcache.mp.host` / `lmcache.mp.server_urls`), and no other container of its
    pod runs `lmcache server` or `python -m lmcache.v1.multiprocess.server`, so it connects
    to the default `tcp://localhost:5555` inside its own pod.

    Why
    ---
    The MP connector does no caching itself: without an `lmcache server` in the same pod (a
    sidecar) or on the node with host networking, the engine waits for a server that never
    answers. The server also owns the cache size (vLLM passes no `--kv-offloading-size`).

    Example
    -------
    A Deployment running `vllm serve m --kv-offloading-backend lmcache --kv-offloading-size
    100` on 0.32.0 and no LMCache server container.

    Fix
    ---
    Run `lmcache server` as a sidecar (sharing IPC with the engine), set
    `lmcache.mp.host`/`lmcache.mp.port` to the node's server, or set
    `"lmcache.mp.autostart": true`.

    Releases
    --------
    LMCache releases with the MP connector (`mp_keys` in `rules/lmcache/`).
    """

    code = "CN023"
    name = "lmcache-mp-server-not-started"
    default_severity = Severity.info
    summary = "LMCacheMPConnector in a container with no LMCache server named or autostarted"
    references = (
        LMCACHE_MP_CONNECTOR,
        VLLM_CONFIG_032,
    )
    since = "0.2.0"

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        if ctx.config.invocation.kind not in CONTAINER_INPUTS:
            return
        if MP_CONNECTOR not in ctx.connector_names:
            return
        extra = dict(ctx.extra_config)
        for name, child in ctx.connector_extra_configs:
            if name == MP_CONNECTOR:
                extra.update(child)
        named = any(k in extra for k in ("lmcache.mp.host", "lmcache.mp.server_urls"))
        if extra.get(AUTOSTART) or named:
            return
        if any(_runs_mp_server(c) for c in ctx.config.invocation.pod_containers):
            return  # a sidecar in the same pod serves tcp://localhost:5555
        yield self.finding(
            "LMCacheMPConnector connects to an LMCache server at tcp://localhost:5555 inside "
            "this pod; nothing in this config starts one (no lmcache.mp.autostart, no "
            "lmcache.mp.host): run `lmcache server` as a sidecar or point lmcache.mp.host at "
            "the node's server.",
            flag=AUTOSTART,
            location=ctx.connector_location,
        )


@register
class LmcacheMpServerWithoutGpu(ConfigRule):
    """Reports an LMCache MP server container that is given no GPU next to a CUDA engine.

    What
    ----
    The engine loads `LMCacheMPConnector` and another container of its pod runs
    `lmcache server` (or `python -m lmcache.v1.multiprocess.server`) with no `*/gpu`
    resource and no `NVIDIA_VISIBLE_DEVICES`, so it sees no GPU.

    Why
    ---
    The server receives the engine's KV cache as CUDA IPC handles and copies GPU to CPU
    itself: without the GPUs in its container it cannot open them
    (`cudaErrorMapBufferObjectFailed` at `REGISTER_KV_CACHE`, LMCache#4534), and nothing is
    stored. LMCache's own Kubernetes example gives both containers every GPU of the pod.

    Example
    -------
    A Deployment whose `vllm` container loads `LMCacheMPConnector` with
    `nvidia.com/gpu: 1` and whose `lmcache-server` sidecar has no GPU resource.

    Fix
    ---
    Give the server container the same GPUs (`NVIDIA_VISIBLE_DEVICES=all` with the GPUs
    allocated at pod level, as LMCache's example does) and host IPC or a shared /dev/shm.

    Releases
    --------
    LMCache releases with the multiprocess server; the engine's GPU build is assumed
    unless its image names a CPU build. A container given GPUs through a DRA claim is not
    judged.
    """

    code = "CN062"
    name = "lmcache-mp-server-without-gpu"
    default_severity = Severity.error
    summary = "LMCache MP server container without GPU access next to a CUDA engine"
    references = (
        lmcache_pr(2128, "LMCache's Kubernetes example: the server needs GPU access for IPC"),
        lmcache_issue(4534, "REGISTER_KV_CACHE fails when the server sidecar sees no GPU"),
    )
    since = "0.3.0"

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        if ctx.config.invocation.kind not in CONTAINER_INPUTS:
            return
        if MP_CONNECTOR not in ctx.connector_names:
            return
        image = ctx.config.invocation.image or ""
        if "cpu" in image.rsplit("/", 1)[-1].lower():
            return  # a CPU build of vLLM hands the server no CUDA memory
        for container in ctx.config.invocation.pod_containers:
            if container.gpus is False and _runs_mp_server(container):
                yield self.finding(
                    f"Container `{container.name}` runs the LMCache server but is given no "
                    "GPU: it cannot open the engine's CUDA IPC handles, so registering the "
                    "KV cache fails and nothing is offloaded.",
                    flag=KV_TRANSFER_CONFIG,
                    location=container.location or ctx.connector_location,
                    container=container.name,
                )
                return
