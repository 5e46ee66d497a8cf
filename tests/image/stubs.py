"""Fake lmcache / nixl / mooncake / vllm packages for the runtime probe.

Each package is as small as the probe needs: the submodules it imports, the MP
adapter symbols, and a KVConnectorFactory whose loaders import the packages the
way vLLM's do. ``failures`` makes chosen modules raise the errors real images have
shown (vllm #39923 nixl_ep, #42511 mooncake.engine, the lmcache 0.4.3 adapter).
"""

from __future__ import annotations

from pathlib import Path

LIBCUDART = "libcudart.so.12: cannot open shared object file: No such file or directory"
LIBCUDA = "libcuda.so.1: cannot open shared object file: No such file or directory"

FACTORY = """
_LMCACHE = "lmcache.integration.vllm."
_MP_WORKER = "LMCacheMPWorkerAdapter"


def _load(module, name):
    def loader():
        import importlib
        return getattr(importlib.import_module(module), name)
    return loader


class KVConnectorFactory:
    _registry = {
        "LMCacheConnectorV1": _load(_LMCACHE + "vllm_v1_adapter", "LMCacheConnectorV1"),
        "LMCacheMPConnector": _load(_LMCACHE + "vllm_multi_process_adapter", _MP_WORKER),
        "NixlConnector": _load("nixl_ep", "Connector"),
        "MooncakeConnector": _load("mooncake.engine", "TransferEngine"),
        "ExampleConnector": _load("vllm.example", "ExampleConnector"),
    }

    @classmethod
    def get_connector_class_by_name(cls, name):
        return cls._registry[name]()
"""


def write_stubs(
    root: Path,
    *,
    packages: tuple[str, ...] = ("lmcache", "nixl", "mooncake", "vllm"),
    failures: dict[str, str] | None = None,
    distributions: dict[str, str] | None = None,
    adapter_symbols: tuple[str, ...] = (
        "LMCacheMPSchedulerAdapter",
        "LMCacheMPWorkerAdapter",
        "ParallelStrategy",
    ),
) -> Path:
    """Write the stubs under ``root``; ``failures`` maps a module file to its ImportError text."""
    failures = failures or {}
    files: dict[str, str] = {}
    if "lmcache" in packages:
        adapter = "".join(f"class {s}:\n    pass\n\n\n" for s in adapter_symbols)
        files |= {
            "lmcache/__init__.py": '__version__ = "0.5.6"\n',
            "lmcache/c_ops.py": "",
            "lmcache/integration/__init__.py": "",
            "lmcache/integration/vllm/__init__.py": "",
            "lmcache/integration/vllm/vllm_multi_process_adapter.py": adapter,
            "lmcache/integration/vllm/vllm_v1_adapter.py": "class LMCacheConnectorV1:\n    pass\n",
        }
    if "nixl" in packages:
        files |= {
            "nixl/__init__.py": '__version__ = "1.5.0"\n',
            "nixl_ep.py": "class Connector:\n    pass\n",
        }
    if "mooncake" in packages:
        files |= {
            "mooncake/__init__.py": "",
            "mooncake/engine.py": "class TransferEngine:\n    pass\n",
        }
    if "vllm" in packages:
        files |= {
            "vllm/__init__.py": '__version__ = "0.32.0"\n',
            "vllm/example.py": "class ExampleConnector:\n    pass\n",
            "vllm/distributed/__init__.py": "",
            "vllm/distributed/kv_transfer/__init__.py": "",
            "vllm/distributed/kv_transfer/kv_connector/__init__.py": "",
            "vllm/distributed/kv_transfer/kv_connector/factory.py": FACTORY,
        }
    for dist, version in (distributions or {}).items():
        info = f"{dist.replace('-', '_')}-{version}.dist-info/METADATA"
        files[info] = f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n"
    for name, message in failures.items():
        files[name] = f"raise ImportError({message!r})\n"
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root
