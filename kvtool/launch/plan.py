"""Turn a recipe, the launch parameters and one release's facts into a launch plan.

The plan is target-neutral: the processes with their full argv, environment, ports,
health endpoints and memory sizes. Renderers (:mod:`kvtool.launch.targets`) only
format it as a shell script, a compose file, Kubernetes manifests or JSON.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from kvtool.errors import KvtoolError
from kvtool.launch.recipe import ProcessTemplate, Recipe
from kvtool.launch.sizes import LaunchSizes
from kvtool.launch.support import (
    below_security_floor,
    hma_disable_needed,
    tier_parameters,
    unmet,
)
from kvtool.launch.template import as_text, fill
from kvtool.releases.model import ReleaseFacts

Entrypoint = Literal["cli", "module"]

API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"
"""``python -m`` form of the server, for installs whose ``vllm`` script is broken."""


CONTAINER_OVERHEAD_GIB = 5.0
CONTAINER_LIMIT_FACTOR = 1.5
"""The LMCache operator design (https://github.com/LMCache/LMCache/issues/2693):
request = ceil(pinned + 5) GiB, limit = ceil(request x 1.5) GiB."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class LaunchOptions(_Frozen):
    """What the operator asked for, validated; sizes come separately from kvtool.sizing."""

    model: str
    tp: int = Field(ge=1)
    target: str = "shell"  # one of kvtool.launch.targets.TARGETS
    entrypoint: Entrypoint = "cli"
    python: str = "python3"  # interpreter for --entrypoint module
    image: str | None = None  # default: vllm/vllm-openai:v<version>
    port: int = Field(default=8000, ge=1, le=65535)
    lmcache_port: int = Field(default=5555, ge=1, le=65535)  # LMCache 0.5.6 defaults
    lmcache_http_port: int = Field(default=8080, ge=1, le=65535)
    fs_path: str = "/mnt/nvme/kvtool-kv"
    kaito_preset: str | None = None
    extra_args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    name: str | None = None  # base name of compose services / Kubernetes objects
    allow_below_security_floor: bool = False
    # The ``kvtool launch`` words that asked for this plan, recorded in the files' header
    # so a generated file says how to make it again.
    command_line: tuple[str, ...] = ()


class Process(_Frozen):
    """One process of the setup, ready to render."""

    name: str
    kind: Literal["vllm", "lmcache-server"]
    command: tuple[str, ...]  # the program and its sub-command, e.g. ("vllm", "serve")
    args: tuple[str, ...]  # everything after ``command``, the model included for vLLM
    env: tuple[tuple[str, str], ...] = ()
    pod_ip_env: tuple[str, ...] = ()
    port: int
    health_path: str
    ports: dict[str, int] = Field(default_factory=dict)
    gpus: int = 0  # GPUs the process's container requests
    cuda_devices: str | None = None  # set when several engines share one host
    kv_transfer_config: dict[str, Any] | None = None
    host_paths: tuple[str, ...] = ()
    pinned_memory_gib: float | None = None
    memory_request_gib: int | None = None
    memory_limit_gib: int | None = None

    @property
    def argv(self) -> tuple[str, ...]:
        return (*self.command, *self.args)


class KaitoPlan(_Frozen):
    utilization: float
    preset: str
    tp: int
    l1_gib: float | None  # what KAITO will compute, when host RAM was given
    # `vllm serve` flags for the ConfigMap's ``vllm:`` section, which KAITO passes on.
    vllm_flags: dict[str, Any] = Field(default_factory=dict)


class LaunchPlan(_Frozen):
    recipe: str
    title: str
    vllm_version: str
    model: str
    tp: int
    image: str
    name: str
    processes: tuple[Process, ...] = ()
    kaito: KaitoPlan | None = None
    sizes: dict[str, Any] = Field(default_factory=dict)
    notes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    command_line: tuple[str, ...] = ()  # see LaunchOptions.command_line

    @property
    def engines(self) -> tuple[Process, ...]:
        """The vLLM processes, in recipe order."""
        return tuple(p for p in self.processes if p.kind == "vllm")

    @property
    def sidecars(self) -> tuple[Process, ...]:
        """Every process that is not an engine (the LMCache server), started first."""
        return tuple(p for p in self.processes if p.kind != "vllm")


def _command(process: ProcessTemplate, options: LaunchOptions) -> tuple[str, ...]:
    if process.kind == "lmcache-server":
        return ("lmcache", "server")
    if options.entrypoint == "module":
        return (options.python, "-m", API_SERVER_MODULE)
    return ("vllm", "serve")


def _model_words(options: LaunchOptions) -> tuple[str, ...]:
    # The api_server module has no positional model; ``vllm serve`` takes it first.
    return ("--model", options.model) if options.entrypoint == "module" else (options.model,)


def _env(
    template: ProcessTemplate,
    params: Mapping[str, Any],
    facts: ReleaseFacts,
    options: LaunchOptions,
    where: str,
) -> tuple[tuple[str, str], ...]:
    known = {e.name for e in facts.env_vars}
    env = {k: as_text(fill(v, params, where)) for k, v in template.env.items()}
    for key, value in template.env_if_known.items():
        if key in known:
            env[key] = as_text(fill(value, params, where))
    if template.kind == "vllm":
        env.update(dict(options.env))
    return tuple(env.items())


def memory_request_and_limit(pinned_gib: float) -> tuple[int, int]:
    """Container memory request and limit in GiB for ``pinned_gib`` of pinned host memory.

    The LMCache operator design's rule (golden L1 60 -> 65Gi / 98Gi):
    request = ceil(pinned + 5), limit = ceil(request * 1.5). The 5 GiB is the
    process's own working memory beside the pinned pool; the 1.5 leaves room for
    allocation bursts without an OOM kill.
    """
    request = math.ceil(pinned_gib + CONTAINER_OVERHEAD_GIB)
    return request, math.ceil(request * CONTAINER_LIMIT_FACTOR)


def build_plan(
    recipe: Recipe,
    options: LaunchOptions,
    facts: ReleaseFacts,
    sizes: LaunchSizes,
) -> LaunchPlan:
    """The plan for ``recipe`` at ``facts.version``; a KvtoolError when it cannot run there."""
    reasons = unmet(recipe, facts, secure_only=not options.allow_below_security_floor)
    insecure = below_security_floor(facts.version)
    if reasons:
        # The override is named only where it would help: a security-floor reason.
        override = (
            "; --allow-below-security-floor accepts an affected release"
            if set(insecure) & set(reasons)
            else ""
        )
        raise KvtoolError(
            f"recipe {recipe.name} does not support vLLM {facts.version}: {'; '.join(reasons)}"
            f" (see `kvtool launch --list` for the releases it supports{override})"
        )
    if options.target not in recipe.target_names:
        raise KvtoolError(
            f"recipe {recipe.name} renders only for --target {'|'.join(recipe.target_names)}, "
            f"not {options.target}"
        )
    params = {**_parameters(options), **sizes.values, **tier_parameters(recipe, facts)}
    engine_count = sum(1 for p in recipe.processes if p.kind == "vllm")
    hma_off = hma_disable_needed(recipe, facts)
    processes: list[Process] = []
    engine_index = 0
    for template in recipe.processes:
        where = f"recipe {recipe.name}, process {template.name}"
        index = engine_index if template.kind == "vllm" else None
        processes.append(
            _process(template, options, facts, params, where, hma_off, index, engine_count)
        )
        engine_index += template.kind == "vllm"
    kaito = None
    if recipe.kaito is not None:
        kaito = KaitoPlan(
            utilization=float(params["utilization"]),
            preset=str(fill(recipe.kaito.preset, params, f"recipe {recipe.name}")),
            tp=options.tp,
            l1_gib=sizes.values.get("kaito_l1_gib"),
            vllm_flags=kaito_flags(options.extra_args),
        )
    return LaunchPlan(
        command_line=options.command_line,
        recipe=recipe.name,
        title=recipe.title,
        vllm_version=facts.version,
        model=options.model,
        tp=options.tp,
        image=options.image or f"vllm/vllm-openai:v{facts.version}",
        name=options.name or recipe.name,
        processes=tuple(processes),
        kaito=kaito,
        sizes=dict(sizes.values),
        notes=recipe.notes,
        warnings=(*insecure, *sizes.warnings),
    )


def kaito_flags(args: tuple[str, ...]) -> dict[str, Any]:
    """``--max-model-len 8192 --enforce-eager`` as KAITO's ``vllm:`` keys (dashed, no ``--``)."""
    flags: dict[str, Any] = {}
    index = 0
    while index < len(args):
        word = args[index]
        if not word.startswith("--"):
            raise KvtoolError(f"extra argument {word!r}: KAITO takes `--flag [value]` pairs only")
        key, sep, inline = word[2:].partition("=")
        if sep:
            flags[key] = inline
        elif index + 1 < len(args) and not args[index + 1].startswith("--"):
            flags[key] = args[index + 1]
            index += 1
        else:
            flags[key] = True
        index += 1
    return flags


def _parameters(options: LaunchOptions) -> dict[str, Any]:
    base = options.port
    return {
        "model": options.model,
        "tp": options.tp,
        "port": base,
        # A prefill/decode pair on one host needs two HTTP ports (offsets from --port,
        # so one flag moves both) and two NIXL side channels: vLLM's default
        # VLLM_NIXL_SIDE_CHANNEL_PORT (5600, envs.py at 0.32.0) and the next one.
        "prefill_port": base + 100,
        "decode_port": base + 200,
        "prefill_side_channel_port": 5600,
        "decode_side_channel_port": 5601,
        "lmcache_port": options.lmcache_port,
        "lmcache_http_port": options.lmcache_http_port,
        "lmcache_metrics_port": 9090,
        "fs_path": options.fs_path,
        "kaito_preset": options.kaito_preset or options.model,
    }


def _process(
    template: ProcessTemplate,
    options: LaunchOptions,
    facts: ReleaseFacts,
    params: Mapping[str, Any],
    where: str,
    hma_off: bool,
    engine_index: int | None,
    engine_count: int,
) -> Process:
    args = [as_text(word) for word in fill(list(template.args), params, where)]
    kv_config = None
    if template.kind == "vllm":
        args = [*_model_words(options), *args]
        if template.kv_transfer_config is not None:
            kv_config = fill(template.kv_transfer_config, params, where)
            args += ["--kv-transfer-config", json.dumps(kv_config, separators=(",", ":"))]
        if hma_off:
            args.append("--disable-hybrid-kv-cache-manager")
        args += options.extra_args
    pinned = None
    request = limit = None
    if template.pinned_memory is not None:
        pinned = float(_require(params, template.pinned_memory, where))
        request, limit = memory_request_and_limit(pinned)
    cuda_devices = None
    if engine_index is not None and engine_count > 1:
        first = engine_index * options.tp
        cuda_devices = ",".join(str(d) for d in range(first, first + options.tp))
    return Process(
        name=template.name,
        kind=template.kind,
        command=_command(template, options),
        args=tuple(args),
        env=_env(template, params, facts, options, where),
        pod_ip_env=template.pod_ip_env,
        port=int(fill(template.port, params, where)),
        health_path=template.health_path,
        ports={k: int(fill(v, params, where)) for k, v in template.ports.items()},
        gpus=options.tp if template.kind == "vllm" else 0,
        cuda_devices=cuda_devices,
        kv_transfer_config=kv_config,
        host_paths=tuple(str(fill(p, params, where)) for p in template.host_paths),
        pinned_memory_gib=pinned,
        memory_request_gib=request,
        memory_limit_gib=limit,
    )


def _require(params: Mapping[str, Any], name: str, where: str) -> Any:
    value = params.get(name)
    if value is None:
        raise KvtoolError(f"{where}: needs {name}; pass --host-ram-gib")
    return value
