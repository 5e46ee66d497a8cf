"""kvtool's runtime probe: which KV-connector packages import, run inside the image.

Standalone on purpose: kvtool sends this file's text to ``python -`` (``--python``) or
``python3 -c`` (inside a container), so it may use only the standard library and must
run on any Python 3.8+. It never raises: every failure becomes data. The last stdout
line is ``KVTOOL-PROBE-JSON:`` followed by one JSON object; imports may print anything
before it, so their stdout is diverted to stderr while they run.
"""

import contextlib
import importlib
import json
import platform
import sys

MARKER = "KVTOOL-PROBE-JSON:"
# (module, the package whose absence makes this one "not installed")
IMPORTS = (
    ("lmcache", "lmcache"),
    ("lmcache.c_ops", "lmcache"),
    ("nixl", "nixl"),
    ("nixl_ep", "nixl"),
    ("mooncake", "mooncake"),
    ("mooncake.engine", "mooncake"),
)
MP_ADAPTER_MODULE = "lmcache.integration.vllm.vllm_multi_process_adapter"
# ParallelStrategy arrived in lmcache 0.4.4; vLLM's LMCacheMPConnector imports all three.
MP_ADAPTER_SYMBOLS = ("LMCacheMPSchedulerAdapter", "LMCacheMPWorkerAdapter", "ParallelStrategy")
FACTORY_MODULE = "vllm.distributed.kv_transfer.kv_connector.factory"
# Installed distributions worth reporting: their names carry the CUDA major a wheel
# was built for (nixl-cu12, mooncake-transfer-engine-cuda13), and their versions are
# the releases the known-bug database checks (kvtool.audit.component_release).
DISTRIBUTION_PREFIXES = ("lmcache", "nixl", "mooncake", "cupy", "torch", "ai-dynamo", "aibrix")


def _failure(exc):
    result = {
        "ok": False,
        "error": f"{type(exc).__name__}: {exc}",
        "error_type": type(exc).__name__,
    }
    missing = getattr(exc, "name", None)
    if isinstance(exc, ImportError) and type(exc).__name__ == "ModuleNotFoundError" and missing:
        result["missing"] = missing
    return result


def _version(module):
    version = getattr(module, "__version__", None)
    if isinstance(version, str):
        return version
    try:
        from importlib import metadata

        top = module.__name__.split(".")[0]
        for dist in metadata.packages_distributions().get(top, []):
            return metadata.version(dist)
    except Exception:
        return None
    return None


def _import(name):
    try:
        module = importlib.import_module(name)
    except (Exception, SystemExit) as exc:
        return _failure(exc), None
    result = {"ok": True, "version": _version(module) if "." not in name else None}
    return result, module


def _where(result, module):
    """Record the file a module came from: a c_ops that is not a .so is the torch fallback."""
    result["loaded"] = getattr(module, "__file__", None)


def _distributions():
    try:
        from importlib import metadata

        found = {}
        for dist in metadata.distributions():
            name = (dist.metadata["Name"] or "").lower()
            if name.startswith(DISTRIBUTION_PREFIXES):
                found[name] = dist.version
        return found
    except Exception:
        return {}


def _mp_adapter():
    result, module = _import(MP_ADAPTER_MODULE)
    if module is None:
        return result
    absent = [s for s in MP_ADAPTER_SYMBOLS if not hasattr(module, s)]
    if absent:
        return {
            "ok": False,
            "error_type": "ImportError",
            "error": "ImportError: cannot import name {} from {}".format(
                ", ".join(repr(a) for a in absent), MP_ADAPTER_MODULE
            ),
        }
    return {"ok": True}


def _connectors(report):
    result, factory_module = _import(FACTORY_MODULE)
    if factory_module is None:
        report["factory_error"] = result["error"]
        return
    factory = getattr(factory_module, "KVConnectorFactory", None)
    registry = getattr(factory, "_registry", None)
    if not isinstance(registry, dict):
        report["factory_error"] = "KVConnectorFactory has no _registry dict"
        return
    by_name = getattr(factory, "get_connector_class_by_name", None)
    for name in sorted(registry):
        try:
            cls = by_name(name) if callable(by_name) else registry[name]()
            report["connectors"][name] = {
                "ok": True,
                "loaded": f"{cls.__module__}.{cls.__qualname__}",
            }
        except (Exception, SystemExit) as exc:
            report["connectors"][name] = _failure(exc)


def run():
    report = {
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "imports": {},
        "mp_adapter": None,
        "vllm": None,
        "connectors": {},
        "factory_error": None,
        "torch": None,
        "distributions": _distributions(),
    }
    installed = {}
    for name, package in IMPORTS:
        if name != package and not installed.get(package, False):
            report["imports"][name] = {
                "ok": False,
                "error_type": "Skipped",
                "error": f"Skipped: {package} did not import",
            }
            continue
        result, module = _import(name)
        if module is not None and "." in name:
            _where(result, module)
        if name == package:
            installed[package] = result["ok"]
        report["imports"][name] = result
    if installed.get("lmcache"):
        report["mp_adapter"] = _mp_adapter()
    report["vllm"], vllm = _import("vllm")
    if vllm is None:
        report["factory_error"] = report["vllm"]["error"]
    else:
        _connectors(report)
    torch = sys.modules.get("torch")
    report["torch"] = getattr(torch, "__version__", None) if torch is not None else None
    return report


def main():
    real_stdout = sys.stdout
    with contextlib.redirect_stdout(sys.stderr):
        report = run()
    real_stdout.write("\n" + MARKER + json.dumps(report) + "\n")
    real_stdout.flush()


if __name__ == "__main__":
    main()
