"""``--target compose``: a Compose file with one service per process.

Sidecars (the LMCache server) own the network namespace and the engine joins it
(``network_mode: service:...``), so ``127.0.0.1`` means the same thing to both, as in
a Kubernetes pod; the engine's port is therefore published on the sidecar. Engines
start once the sidecar's health check passes. Both share the host IPC namespace,
which the server needs to reach the engine's GPU memory.
"""

from __future__ import annotations

from typing import Any

from kvtool.launch.plan import LaunchPlan, Process
from kvtool.launch.targets.header import header_lines
from kvtool.launch.targets.names import check_object_name
from kvtool.launch.targets.yamltext import dump

FILE_NAME = "compose.yaml"
HF_CACHE = "~/.cache/huggingface:/root/.cache/huggingface"


def _gpu_reservation(process: Process, all_gpus: bool) -> dict[str, Any]:
    device: dict[str, Any] = {"driver": "nvidia", "capabilities": ["gpu"]}
    if all_gpus:
        device["count"] = "all"
    elif process.cuda_devices is not None:
        device["device_ids"] = process.cuda_devices.split(",")
    else:
        device["count"] = process.gpus
    return {"devices": [device]}


def _healthcheck(process: Process) -> dict[str, Any]:
    url = f"http://127.0.0.1:{process.port}{process.health_path}"
    probe = f"import urllib.request; urllib.request.urlopen({url!r}, timeout=5)"
    return {
        "test": ["CMD", "python3", "-c", probe],
        "interval": "10s",
        "timeout": "5s",
        # Engines load weights first: allow 30 minutes, as KAITO's startup probe does.
        "start_period": "30m" if process.kind == "vllm" else "60s",
        "retries": 3,
    }


def _service(plan: LaunchPlan, process: Process, owner: str | None) -> dict[str, Any]:
    service: dict[str, Any] = {
        "image": plan.image,
        "entrypoint": list(process.command),
        "command": list(process.args),
        "ipc": "host",
    }
    if process.env:
        service["environment"] = dict(process.env)
    volumes = [HF_CACHE] if process.kind == "vllm" else []
    volumes += [f"{path}:{path}" for path in process.host_paths]
    if volumes:
        service["volumes"] = volumes
    resources: dict[str, Any] = {
        "reservations": _gpu_reservation(process, all_gpus=process.kind != "vllm")
    }
    if process.memory_request_gib is not None and process.memory_limit_gib is not None:
        resources["reservations"]["memory"] = f"{process.memory_request_gib}g"
        resources["limits"] = {"memory": f"{process.memory_limit_gib}g"}
    service["deploy"] = {"resources": resources}
    service["healthcheck"] = _healthcheck(process)
    if owner is not None:
        service["network_mode"] = f"service:{owner}"
        service["depends_on"] = {owner: {"condition": "service_healthy"}}
    return service


def build(plan: LaunchPlan) -> dict[str, Any]:
    """The compose document as a dict (the renderer dumps it as YAML)."""
    services: dict[str, Any] = {}
    owner = plan.sidecars[0].name if plan.sidecars else None
    for sidecar in plan.sidecars:
        services[sidecar.name] = _service(plan, sidecar, None)
    for engine in plan.engines:
        services[engine.name] = _service(plan, engine, owner)
        published = f"{engine.port}:{engine.port}"
        host = services[owner] if owner is not None else services[engine.name]
        host.setdefault("ports", []).append(published)
    return {"services": services}


def render(plan: LaunchPlan) -> dict[str, str]:
    check_object_name(plan.name, "--name")
    header = header_lines(plan, "compose")
    return {FILE_NAME: "\n".join(header) + "\n" + dump(build(plan))}
