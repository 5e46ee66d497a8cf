"""Fold the build flag and the runtime probe into one verdict per connector.

Precedence: a probe that ran decides (it saw the packages); otherwise the build flag
decides; otherwise the failed step's reason makes the verdict "unknown". A failed
step never yields "not bundled", and an import that needs the NVIDIA driver is a
probe-environment gap ("unknown"), not a bundling failure.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from kvtool.image.model import (
    BuildFlag,
    Connector,
    ConnectorVerdict,
    FlagValue,
    ImportResult,
    ProbeReport,
    StepOutcome,
    Verdict,
)

# The submodule whose failure is the known real-world breakage for each package.
SUBMODULE = {
    Connector.lmcache: "lmcache.c_ops",
    Connector.nixl: "nixl_ep",
    Connector.mooncake: "mooncake.engine",
}
DRIVER_LIBRARY = "libcuda.so"
# nixl-cu12, mooncake-transfer-engine-cuda13, cupy-cuda13x: the CUDA major a wheel targets.
_WHEEL_CUDA_RE = re.compile(r"-cu(?:da)?(\d{2})x?$")


def connector_family(connector_name: str) -> Connector | None:
    """Which package a vLLM connector (e.g. ``LMCacheMPConnector``) depends on."""
    lowered = connector_name.lower()
    return next((c for c in Connector if c.value in lowered), None)


def decide(
    connector: Connector,
    build_flag: BuildFlag | None,
    build_step: StepOutcome,
    probe: ProbeReport | None,
    runtime_step: StepOutcome,
) -> ConnectorVerdict:
    flag = build_flag.value if build_flag else None
    if probe is not None:
        return _from_probe(connector, flag, probe)
    failed = next((s for s in (runtime_step, build_step) if s.status == "failed"), None)
    if failed is not None:
        return ConnectorVerdict(
            connector=connector,
            verdict=Verdict.unknown,
            reason=f"{failed.kind}: {failed.reason}",
            build_flag=flag,
        )
    if build_flag is None:
        return ConnectorVerdict(
            connector=connector, verdict=Verdict.unknown, reason="no check ran", build_flag=None
        )
    return _from_build_flag(connector, build_flag)


def _from_build_flag(connector: Connector, flag: BuildFlag) -> ConnectorVerdict:
    line = flag.deciding
    where = f" (history #{line.index}, {flag.decided_by})" if line else ""
    if flag.value == "true":
        return ConnectorVerdict(
            connector=connector,
            verdict=Verdict.bundled,
            reason=f"built with INSTALL_KV_CONNECTORS=true{where}; imports not checked",
            build_flag="true",
        )
    if flag.value == "false":
        return ConnectorVerdict(
            connector=connector,
            verdict=Verdict.not_bundled,
            reason=f"built with INSTALL_KV_CONNECTORS={line.value if line else 'false'}{where}",
            build_flag="false",
        )
    return ConnectorVerdict(
        connector=connector,
        verdict=Verdict.unknown,
        reason="the image history records no INSTALL_KV_CONNECTORS value "
        "(another builder or Dockerfile); run the runtime check",
        build_flag="unknown",
    )


def _from_probe(
    connector: Connector, flag: FlagValue | None, probe: ProbeReport
) -> ConnectorVerdict:
    name = connector.value
    top = probe.imports.get(name) or ImportResult(ok=False, error="the probe did not try it")
    if not top.ok:
        if top.missing is not None and top.missing.split(".")[0] == name:
            note = " although the build flag says true" if flag == "true" else ""
            return ConnectorVerdict(
                connector=connector,
                verdict=Verdict.not_bundled,
                reason=f"{name} is not installed{note}",
                error=top.error,
                build_flag=flag,
                runtime="missing",
            )
        return _failure(connector, flag, f"import {name} fails", top)
    checks: list[tuple[str, ImportResult | None]] = [
        (f"import {SUBMODULE[connector]} fails", probe.imports.get(SUBMODULE[connector]))
    ]
    if connector is Connector.lmcache:
        checks.append(("vLLM's LMCache MP adapter symbols are missing", probe.mp_adapter))
    loads = {n: r for n, r in probe.connectors.items() if connector_family(n) is connector}
    checks.extend((f"vLLM cannot load {n}", r) for n, r in sorted(loads.items()))
    for what, result in checks:
        if result is not None and not result.ok:
            return _failure(connector, flag, what, result)
    loaded = f"; vLLM loads {', '.join(sorted(loads))}" if loads else ""
    if probe.factory_error:
        loaded = f"; vLLM connector loads not checked ({probe.factory_error})"
    version = f" {top.version}" if top.version else ""
    return ConnectorVerdict(
        connector=connector,
        verdict=Verdict.bundled,
        reason=f"{name}{version} and {SUBMODULE[connector]} import{loaded}",
        build_flag=flag,
        runtime="ok",
    )


def _failure(
    connector: Connector, flag: FlagValue | None, what: str, result: ImportResult
) -> ConnectorVerdict:
    error = result.error or "unknown error"
    if DRIVER_LIBRARY in error:
        return ConnectorVerdict(
            connector=connector,
            verdict=Verdict.unknown,
            reason=f"{what} for want of the NVIDIA driver in the probe environment; "
            "rerun on a GPU node (--gpus)",
            error=error,
            build_flag=flag,
            runtime="failed",
        )
    return ConnectorVerdict(
        connector=connector,
        verdict=Verdict.broken,
        reason=what,
        error=error,
        build_flag=flag,
        runtime="failed",
    )


def cuda_mismatches(env: Mapping[str, str], distributions: Mapping[str, str]) -> list[str]:
    """Wheels built for another CUDA major than the image's ``CUDA_VERSION`` (vllm #39923:
    a cu12 ``nixl_ep`` in a CUDA 13 image breaks every vllm command)."""
    cuda = env.get("CUDA_VERSION", "")
    image_major = cuda.split(".")[0]
    if not image_major.isdigit():
        return []
    found = []
    for name, version in sorted(distributions.items()):
        match = _WHEEL_CUDA_RE.search(name)
        if match and match.group(1) != image_major:
            found.append(
                f"{name} {version} targets CUDA {match.group(1)}, the image has CUDA {cuda}"
            )
    return found


def exit_code(verdicts: list[ConnectorVerdict], steps: list[StepOutcome]) -> int:
    """0 every connector bundled; 2 a requested step could not run; 1 otherwise."""
    if any(step.status == "failed" for step in steps):
        return 2
    return 0 if all(v.verdict is Verdict.bundled for v in verdicts) else 1
