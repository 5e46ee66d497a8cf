"""Env vars, KV connectors, offload specs/tiers, ``KVTransferConfig`` and the model registry.

Each function reads the module that owns the registry (``envs.py``, the connector
factory, the offload factories, ``config/kv_transfer.py``) with ``ast`` and returns
plain data; deciding what it means for a deployment is left to curated tables.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from kvtool.releases.model import ModelRegistryFacts
from releasegen.configfields import MISSING_DEFAULT, class_fields, type_atoms
from releasegen.source import UNKNOWN, Module, Resolved, WheelSource, jsonable

_ENV_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")
# Files are only parsed for direct env reads when their text could contain one.
_ENV_READ_HINTS = ("environ", "getenv", "get_from_deprecated_env_if_set")


@dataclass
class EnvRead:
    name: str
    source: str  # "envs.py" or the dotted module of the read
    deprecated: bool = False
    replacement: str | None = None


def env_vars(source: WheelSource) -> dict[str, EnvRead]:
    """Keys of ``envs.environment_variables`` plus env vars read anywhere in ``vllm/``
    directly (``os.environ``/``os.getenv``) or through ``get_from_deprecated_env_if_set``."""
    found: dict[str, EnvRead] = {}
    envs = source.module("vllm.envs")
    if envs is not None:
        for name in _environment_variable_keys(envs):
            found[name] = EnvRead(name, "envs.py")
    for member in sorted(source.members):
        if not member.startswith("vllm/"):
            continue
        text = source.text(member)
        if not any(hint in text for hint in _ENV_READ_HINTS):
            continue
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        dotted = source.module_of_member(member)
        for name, deprecated, replacement in _reads_in(tree):
            entry = found.get(name)
            if entry is None:
                entry = found[name] = EnvRead(name, dotted)
            if deprecated:
                entry.deprecated = True
                entry.replacement = entry.replacement or replacement
    return found


def _environment_variable_keys(envs: Module) -> list[str]:
    keys: list[str] = []
    for node in ast.walk(envs.tree):
        target_names: list[str] = []
        value: ast.expr | None = None
        if isinstance(node, ast.Assign):
            target_names = [t.id for t in node.targets if isinstance(t, ast.Name)]
            value = node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            target_names, value = [node.target.id], node.value
        if "environment_variables" in target_names and isinstance(value, ast.Dict):
            for key in value.keys:
                if isinstance(key, ast.Constant) and isinstance(key.value, str):
                    keys.append(key.value)
        # environment_variables["X"] = ... / environment_variables.update({...})
        if isinstance(node, ast.Assign):
            for t in node.targets:
                if (
                    isinstance(t, ast.Subscript)
                    and isinstance(t.value, ast.Name)
                    and t.value.id == "environment_variables"
                    and isinstance(t.slice, ast.Constant)
                    and isinstance(t.slice.value, str)
                ):
                    keys.append(t.slice.value)
    return keys


def _is_os_environ(expr: ast.expr) -> bool:
    return (isinstance(expr, ast.Attribute) and expr.attr == "environ") or (
        isinstance(expr, ast.Name) and expr.id == "environ"
    )


def _reads_in(tree: ast.AST) -> list[tuple[str, bool, str | None]]:
    reads: list[tuple[str, bool, str | None]] = []

    def const(e: ast.expr | None) -> str | None:
        if isinstance(e, ast.Constant) and isinstance(e.value, str) and _ENV_NAME.match(e.value):
            return e.value
        return None

    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            fname = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            first = node.args[0] if node.args else None
            if fname == "get_from_deprecated_env_if_set":
                name = const(first)
                if name:
                    field_arg: ast.expr | None = node.args[2] if len(node.args) > 2 else None
                    for kw in node.keywords:
                        if kw.arg == "field_name":
                            field_arg = kw.value
                    repl = (
                        field_arg.value
                        if isinstance(field_arg, ast.Constant) and isinstance(field_arg.value, str)
                        else None
                    )
                    reads.append((name, True, repl))
            elif isinstance(func, ast.Attribute) and fname in {"get", "pop", "setdefault"}:
                if _is_os_environ(func.value):
                    name = const(first)
                    if name:
                        reads.append((name, False, None))
            elif fname == "getenv":
                name = const(first)
                if name:
                    reads.append((name, False, None))
        elif isinstance(node, ast.Subscript) and _is_os_environ(node.value):
            if isinstance(node.ctx, ast.Load):
                name = const(node.slice)
                if name:
                    reads.append((name, False, None))
        elif isinstance(node, ast.Compare) and any(_is_os_environ(c) for c in node.comparators):
            name = const(node.left)
            if name:
                reads.append((name, False, None))
    return reads


@dataclass
class ConnectorInfo:
    name: str
    module: str
    class_name: str
    supports_hma: bool | None
    hma_note: str | None


_FACTORY_MODULE = "vllm.distributed.kv_transfer.kv_connector.factory"


def _register_calls(module: Module, method: str) -> list[tuple[str, str, str]]:
    """Top-level ``Factory.<method>("name", "module.path", "ClassName")`` calls."""
    calls: list[tuple[str, str, str]] = []
    for stmt in module.tree.body:
        if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)):
            continue
        call = stmt.value
        if not (isinstance(call.func, ast.Attribute) and call.func.attr == method):
            continue
        args = [a.value if isinstance(a, ast.Constant) else None for a in call.args]
        kwargs = {
            k.arg: k.value.value
            for k in call.keywords
            if k.arg and isinstance(k.value, ast.Constant)
        }
        names = ("name", "module_path", "class_name")
        values = [*args, *(kwargs.get(n) for n in names[len(args) :])]
        if len(values) >= 3 and all(isinstance(v, str) for v in values[:3]):
            calls.append((str(values[0]), str(values[1]), str(values[2])))
    return calls


def connectors(source: WheelSource) -> list[ConnectorInfo]:
    factory = source.module(_FACTORY_MODULE)
    if factory is None:
        return []
    has_hma = source.module("vllm.distributed.kv_transfer.kv_connector.v1.base")
    hma_defined = has_hma is not None and "SupportsHMA" in has_hma.bindings
    out: list[ConnectorInfo] = []
    for name, module_path, class_name in _register_calls(factory, "register_connector"):
        found = source.resolve_attr(module_path, class_name)
        # `NixlConnector = NixlPullConnector`: follow plain aliases to the class
        for _ in range(5):
            if isinstance(found, Resolved) and isinstance(found.node, (ast.Name, ast.Attribute)):
                found = source.resolve_expr(found.module, found.node)
        supports: bool | None = False
        note: str | None = None
        if isinstance(found, Resolved) and isinstance(found.node, ast.ClassDef):
            supports = hma_defined and "SupportsHMA" in source.base_names(found)
        elif isinstance(found, Resolved):
            supports, note = None, _dynamic_note(source, found)
        else:
            note = f"class {class_name} not found in {module_path}"
        out.append(ConnectorInfo(name, module_path, class_name, supports, note))
    return out


def _dynamic_note(source: WheelSource, bound: Resolved) -> str:
    """Describe a connector name bound at import time (``X = _resolve_x()``)."""
    expr = bound.node
    text = ast.unparse(expr) if isinstance(expr, ast.expr) else bound.name
    fallbacks: list[str] = []
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name):
        func = bound.module.bindings.get(expr.func.id)
        if isinstance(func, ast.FunctionDef):
            for node in ast.walk(func):
                if isinstance(node, ast.Return) and isinstance(node.value, ast.Name):
                    local = source.resolve(bound.module, node.value.id)
                    if isinstance(local, Resolved) and isinstance(local.node, ast.ClassDef):
                        hma = "SupportsHMA" in source.base_names(local)
                        fallbacks.append(f"{local.name} (SupportsHMA: {'yes' if hma else 'no'})")
    note = f"chosen at import time by `{text}`: an external package's class when importable"
    if fallbacks:
        note += ", else vLLM's built-in " + ", ".join(sorted(set(fallbacks)))
    return note


def offload_specs(source: WheelSource) -> list[str]:
    mod = source.module("vllm.v1.kv_offload.factory")
    return [] if mod is None else [n for n, _, _ in _register_calls(mod, "register_spec")]


def offload_tiers(source: WheelSource) -> list[str]:
    mod = source.module("vllm.v1.kv_offload.tiering.factory")
    return [] if mod is None else [n for n, _, _ in _register_calls(mod, "register_tier")]


@dataclass
class TransferField:
    name: str
    annotation: str
    default: object
    choices: list[str] | None = None


def kv_transfer_config(source: WheelSource) -> tuple[list[TransferField], bool] | None:
    """``KVTransferConfig`` fields and whether unknown keys are rejected."""
    cls = None
    for dotted in ("vllm.config.kv_transfer", "vllm.config"):
        found = source.find_class(dotted, "KVTransferConfig")
        if found is not None and isinstance(found.node, ast.ClassDef):
            cls = found
            break
    if cls is None:
        return None
    fields = []
    for f in class_fields(source, cls):
        if f.name.startswith("_"):
            continue
        default: object = None if f.default in (MISSING_DEFAULT, UNKNOWN) else f.default
        if f.factory:
            default = None
        atoms = type_atoms(source, f.module, f.annotation)
        literal = next((a for a in atoms if a.kind == "literal"), None)
        choices = None
        if literal is not None and not any(a.kind == "str" for a in atoms):
            choices = [str(v) for v in literal.values]
            if any(a.kind == "none" for a in atoms):
                choices.append("None")
        fields.append(TransferField(f.name, ast.unparse(f.annotation), jsonable(default), choices))
    return fields, _forbids_extra(source, cls)


def _forbids_extra(source: WheelSource, cls: Resolved) -> bool:
    """True when the class's decorator makes pydantic reject unknown keys: either a
    ``config=ConfigDict(extra="forbid")`` argument or a decorator function (vLLM's
    ``@config``) whose body sets ``extra="forbid"``."""
    assert isinstance(cls.node, ast.ClassDef)
    for deco in cls.node.decorator_list:
        text = ast.unparse(deco)
        if "forbid" in text:
            return True
        target = deco.func if isinstance(deco, ast.Call) else deco
        found = source.resolve_expr(cls.module, target)
        if isinstance(found, Resolved) and isinstance(found.node, ast.FunctionDef):
            impl = _implementation(found)
            if impl is not None and "forbid" in ast.unparse(impl):
                return True
    return False


def _implementation(found: Resolved) -> ast.FunctionDef | None:
    """The last (non-``@overload``) definition of a function in its module."""
    impl: ast.FunctionDef | None = None
    for stmt in found.module.tree.body:
        if isinstance(stmt, ast.FunctionDef) and stmt.name == found.name:
            decos = {ast.unparse(d) for d in stmt.decorator_list}
            if not any(d.endswith("overload") for d in decos):
                impl = stmt
    return impl


def load_formats(source: WheelSource) -> list[str]:
    """Keys of ``_LOAD_FORMAT_TO_MODEL_LOADER``: the --load-format values vLLM knows."""
    mod = source.module("vllm.model_executor.model_loader")
    value = None if mod is None else mod.bindings.get("_LOAD_FORMAT_TO_MODEL_LOADER")
    if not isinstance(value, ast.Dict):
        return []
    return [k.value for k in value.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)]


_OFFLOAD_KEY_MEMBERS = (
    "vllm/v1/kv_offload/",
    "vllm/distributed/kv_transfer/kv_connector/v1/offloading",
)


def offload_extra_config_keys(source: WheelSource) -> list[str]:
    """``kv_connector_extra_config`` keys OffloadingConnector and its specs read: string
    keys of ``<...extra_config>.get("key", ...)`` and ``<...extra_config>["key"]`` in
    ``vllm/v1/kv_offload/**`` and the offloading connector's modules."""
    keys: set[str] = set()
    for member in sorted(source.members):
        if not member.startswith(_OFFLOAD_KEY_MEMBERS):
            continue
        try:
            tree = ast.parse(source.text(member), filename=member)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            target: ast.expr | None = None
            key: ast.expr | None = None
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "get"
                and node.args
            ):
                target, key = node.func.value, node.args[0]
            elif isinstance(node, ast.Subscript):
                target, key = node.value, node.slice
            if (
                target is not None
                and isinstance(key, ast.Constant)
                and isinstance(key.value, str)
                and ast.unparse(target).endswith("extra_config")
            ):
                keys.add(key.value)
    return sorted(keys)


_REGISTRY_MODULE = "vllm.model_executor.models.registry"
_ALL_MODELS = "_VLLM_MODELS"  # the union registry.py builds from every per-task dict
_PREVIOUS = "_PREVIOUSLY_SUPPORTED_MODELS"
_TRANSFORMERS_MODULE = "transformers"  # the module of the Transformers backend's classes


def model_registry(source: WheelSource) -> ModelRegistryFacts | None:
    """Architectures ``registry.py`` maps to a vLLM class or to the Transformers backend,
    and those it lists as previously supported (with the last release that served them).

    ``_VLLM_MODELS`` is a dict of ``**`` unpackings of the per-task dicts; each entry maps
    an architecture to ``(module, class)``. None when the release has no such registry.
    """
    registry = source.module(_REGISTRY_MODULE)
    if registry is None or _ALL_MODELS not in registry.bindings:
        return None
    native: set[str] = set()
    transformers: dict[str, str] = {}
    for arch, value in _dict_entries(registry, _ALL_MODELS):
        target = _module_and_class(value)
        if target is not None and target[0] == _TRANSFORMERS_MODULE:
            transformers[arch] = target[1]
        elif target is not None:
            native.add(arch)
    previous = {
        arch: value.value
        for arch, value in _dict_entries(registry, _PREVIOUS)
        if isinstance(value, ast.Constant) and isinstance(value.value, str)
    }
    return ModelRegistryFacts(
        native=tuple(sorted(native)),
        transformers_backend=dict(sorted(transformers.items())),
        previously_supported=dict(sorted(previous.items())),
        source=registry.path,
    )


def _dict_entries(module: Module, name: str) -> list[tuple[str, ast.expr]]:
    """(key, value) of a top-level dict literal, following ``**other_dict`` entries."""
    node = module.bindings.get(name)
    if not isinstance(node, ast.Dict):
        return []
    entries: list[tuple[str, ast.expr]] = []
    for key, value in zip(node.keys, node.values, strict=True):
        if key is None and isinstance(value, ast.Name):
            entries += _dict_entries(module, value.id)
        elif isinstance(key, ast.Constant) and isinstance(key.value, str):
            entries.append((key.value, value))
    return entries


def _module_and_class(value: ast.expr) -> tuple[str, str] | None:
    if isinstance(value, ast.Tuple) and len(value.elts) == 2:
        module, cls = value.elts
        if (
            isinstance(module, ast.Constant)
            and isinstance(module.value, str)
            and isinstance(cls, ast.Constant)
            and isinstance(cls.value, str)
        ):
            return module.value, cls.value
    return None
