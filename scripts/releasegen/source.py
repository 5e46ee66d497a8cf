"""Read a vLLM wheel's Python source straight from the zip and resolve names in it.

Nothing here imports vLLM: modules are parsed with ``ast`` on demand, and names are
followed through ``import`` / ``from ... import`` chains (package re-exports
included) the way Python would bind them at import time, as far as static reading
allows. What cannot be resolved statically comes back as ``None``/``UNKNOWN`` and the
callers decide how to report it.
"""

from __future__ import annotations

import ast
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class _Unknown:
    """A value that static evaluation could not determine."""

    _instance: _Unknown | None = None

    def __new__(cls) -> _Unknown:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNKNOWN"


UNKNOWN: Any = _Unknown()

# Builtins and typing helpers whose result is the iteration of their argument: a
# ``choices=`` built as ``list(get_args(SomeLiteral))`` or ``sorted(SOME_DICT)`` is the
# same sequence ``for x in ...`` would walk.
_ITERATING_CALLS = {"list": list, "tuple": tuple, "sorted": sorted, "set": list, "frozenset": list}
_LITERAL_NAMES = {"Literal"}


@dataclass(frozen=True)
class EnumMember:
    """One member of an ``enum.Enum`` subclass defined in the wheel (``value`` may be
    ``UNKNOWN``, e.g. ``enum.auto()``)."""

    name: str
    value: Any


def jsonable(value: Any) -> Any:
    """A statically evaluated value as JSON data: containers become lists and objects,
    ``UNKNOWN`` becomes null, anything else that JSON cannot hold becomes its repr."""
    if value is UNKNOWN:
        return None
    if isinstance(value, (tuple, set, frozenset, list)):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)


# How many import hops a name may take before we give up (re-export chains are short;
# the bound only guards against cycles).
_MAX_IMPORT_HOPS = 12


@dataclass
class Module:
    """One parsed module: its top-level bindings and imports."""

    name: str  # dotted, e.g. "vllm.engine.arg_utils"
    path: str  # member name in the wheel
    tree: ast.Module
    is_package: bool
    # name -> the node that binds it last at top level (ClassDef, FunctionDef, or the
    # value expression of an assignment)
    bindings: dict[str, ast.AST] = field(default_factory=dict)
    # name -> (module, attribute or None); attribute None means the name is a module
    imports: dict[str, tuple[str, str | None]] = field(default_factory=dict)


@dataclass(frozen=True)
class Resolved:
    """A name resolved to the module that defines it and the defining node."""

    module: Module
    node: ast.AST
    name: str


@dataclass(frozen=True)
class ModuleRef:
    """A name that is bound to a module."""

    module: Module


class WheelSource:
    """Lazy, cached access to the ``vllm/**.py`` members of one wheel."""

    def __init__(self, wheel: Path) -> None:
        self._zip = zipfile.ZipFile(wheel)
        self.members = {n for n in self._zip.namelist() if n.endswith(".py")}
        self._modules: dict[str, Module | None] = {}

    def close(self) -> None:
        self._zip.close()

    def text(self, member: str) -> str:
        return self._zip.read(member).decode("utf-8", errors="replace")

    def member_for(self, dotted: str) -> tuple[str, bool] | None:
        base = dotted.replace(".", "/")
        if f"{base}.py" in self.members:
            return f"{base}.py", False
        if f"{base}/__init__.py" in self.members:
            return f"{base}/__init__.py", True
        return None

    def module(self, dotted: str) -> Module | None:
        if dotted in self._modules:
            return self._modules[dotted]
        found = self.member_for(dotted)
        mod: Module | None = None
        if found is not None:
            member, is_package = found
            try:
                tree = ast.parse(self.text(member), filename=member)
            except SyntaxError:
                tree = None
            if tree is not None:
                mod = Module(dotted, member, tree, is_package)
                _index_bindings(mod, tree.body)
        self._modules[dotted] = mod
        return mod

    def module_of_member(self, member: str) -> str:
        dotted = member[: -len(".py")].replace("/", ".")
        return dotted[: -len(".__init__")] if dotted.endswith(".__init__") else dotted

    # -- name resolution ---------------------------------------------------------

    def resolve(self, module: Module, name: str, hops: int = 0) -> Resolved | ModuleRef | None:
        """Follow ``name`` as bound at the top level of ``module`` to its definition."""
        if hops > _MAX_IMPORT_HOPS:
            return None
        if name in module.bindings:
            return Resolved(module, module.bindings[name], name)
        if name in module.imports:
            target, attr = module.imports[name]
            if attr is None:
                mod = self.module(target)
                return ModuleRef(mod) if mod is not None else None
            return self.resolve_attr(target, attr, hops + 1)
        return None

    def resolve_attr(self, dotted: str, attr: str, hops: int = 0) -> Resolved | ModuleRef | None:
        """Resolve ``from dotted import attr``: a submodule or a name in the module."""
        mod = self.module(dotted)
        if mod is not None:
            found = self.resolve(mod, attr, hops)
            if found is not None:
                return found
        sub = self.module(f"{dotted}.{attr}")
        return ModuleRef(sub) if sub is not None else None

    def resolve_expr(self, module: Module, expr: ast.expr) -> Resolved | ModuleRef | None:
        """Resolve a ``Name`` or dotted ``Attribute`` chain to its definition."""
        if isinstance(expr, ast.Name):
            return self.resolve(module, expr.id)
        if isinstance(expr, ast.Attribute):
            owner = self.resolve_expr(module, expr.value)
            if isinstance(owner, ModuleRef):
                return self.resolve_attr(owner.module.name, expr.attr)
            if isinstance(owner, Resolved) and isinstance(owner.node, ast.ClassDef):
                for stmt in owner.node.body:
                    if (
                        isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                        and stmt.name == expr.attr
                    ):
                        return Resolved(owner.module, stmt, stmt.name)
                    value = _assigned_value(stmt, expr.attr)
                    if value is not None:
                        return Resolved(owner.module, value, expr.attr)
        return None

    def find_class(self, dotted: str, name: str) -> Resolved | None:
        found = self.resolve_attr(dotted, name)
        return found if isinstance(found, Resolved) else None

    # -- classes -------------------------------------------------------------------

    def class_bases(self, cls: Resolved) -> list[Resolved]:
        """The base classes of ``cls`` that are defined in this wheel, in order."""
        assert isinstance(cls.node, ast.ClassDef)
        bases: list[Resolved] = []
        for base in cls.node.bases:
            expr = base.value if isinstance(base, ast.Subscript) else base
            found = self.resolve_expr(cls.module, expr)
            if isinstance(found, Resolved) and isinstance(found.node, ast.ClassDef):
                bases.append(found)
        return bases

    def mro(self, cls: Resolved) -> list[Resolved]:
        """A depth-first, duplicate-free approximation of the MRO (enough for lookups)."""
        seen: set[tuple[str, str]] = set()
        order: list[Resolved] = []

        def visit(c: Resolved) -> None:
            key = (c.module.name, c.name)
            if key in seen:
                return
            seen.add(key)
            order.append(c)
            for base in self.class_bases(c):
                visit(base)

        visit(cls)
        return order

    def base_names(self, cls: Resolved) -> set[str]:
        """Names of every base in the chain, resolved or not (e.g. ``SupportsHMA``)."""
        names: set[str] = set()
        for c in self.mro(cls):
            assert isinstance(c.node, ast.ClassDef)
            for base in c.node.bases:
                expr = base.value if isinstance(base, ast.Subscript) else base
                if isinstance(expr, ast.Name):
                    names.add(expr.id)
                elif isinstance(expr, ast.Attribute):
                    names.add(expr.attr)
                found = self.resolve_expr(c.module, expr)
                if isinstance(found, Resolved):
                    names.add(found.name)
        return names

    def method(self, cls: Resolved, name: str) -> tuple[Resolved, ast.FunctionDef] | None:
        """Find method ``name`` on ``cls`` or its bases; returns the owning class too."""
        for c in self.mro(cls):
            assert isinstance(c.node, ast.ClassDef)
            for stmt in c.node.body:
                if isinstance(stmt, ast.FunctionDef) and stmt.name == name:
                    return c, stmt
        return None

    # -- constant evaluation -------------------------------------------------------

    def evaluate(self, module: Module, expr: ast.expr | None, depth: int = 0) -> Any:
        """Evaluate a constant expression (literals, names bound to literals, string
        concatenation, tuples/lists/dicts of those). Anything else is ``UNKNOWN``."""
        if expr is None or depth > 20:
            return UNKNOWN
        if isinstance(expr, ast.Constant):
            return expr.value
        if isinstance(expr, (ast.Tuple, ast.List, ast.Set)):
            items: list[Any] = []
            for elt in expr.elts:
                if isinstance(elt, ast.Starred):
                    inner = self.iterate(module, elt.value, depth + 1)
                    if inner is UNKNOWN:
                        return UNKNOWN
                    items.extend(inner)
                    continue
                value = self.evaluate(module, elt, depth + 1)
                if value is UNKNOWN:
                    return UNKNOWN
                items.append(value)
            return tuple(items) if isinstance(expr, ast.Tuple) else items
        if isinstance(expr, ast.Dict):
            out: dict[Any, Any] = {}
            for k, v in zip(expr.keys, expr.values, strict=False):
                if k is None:
                    return UNKNOWN
                key, value = (
                    self.evaluate(module, k, depth + 1),
                    self.evaluate(module, v, depth + 1),
                )
                if key is UNKNOWN or value is UNKNOWN:
                    return UNKNOWN
                out[key] = value
            return out
        if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.USub):
            value = self.evaluate(module, expr.operand, depth + 1)
            return -value if isinstance(value, (int, float)) else UNKNOWN
        if isinstance(expr, ast.BinOp):
            left = self.evaluate(module, expr.left, depth + 1)
            right = self.evaluate(module, expr.right, depth + 1)
            if left is UNKNOWN or right is UNKNOWN:
                return UNKNOWN
            try:
                if isinstance(expr.op, ast.Add):
                    return left + right
                if isinstance(expr.op, ast.Mult):
                    return left * right
                if isinstance(expr.op, ast.Pow):
                    return left**right
                if isinstance(expr.op, ast.LShift):
                    return left << right
            except TypeError:
                return UNKNOWN
            return UNKNOWN
        if isinstance(expr, ast.JoinedStr):
            parts: list[str] = []
            for value in expr.values:
                if isinstance(value, ast.Constant):
                    parts.append(str(value.value))
                elif isinstance(value, ast.FormattedValue):
                    inner = self.evaluate(module, value.value, depth + 1)
                    if inner is UNKNOWN:
                        return UNKNOWN
                    parts.append(str(inner))
            return "".join(parts)
        if isinstance(expr, (ast.Name, ast.Attribute)):
            found = self.resolve_expr(module, expr)
            if isinstance(found, Resolved) and isinstance(found.node, ast.expr):
                return self.evaluate(found.module, found.node, depth + 1)
        if isinstance(expr, ast.Call) and len(expr.args) == 1 and not expr.keywords:
            name = _called_name(expr.func)
            if name in _ITERATING_CALLS or name == "get_args":
                items = self.iterate(module, expr, depth + 1)
                if items is UNKNOWN:
                    return UNKNOWN
                return tuple(items) if name in {"tuple", "get_args"} else list(items)
        return UNKNOWN

    def iterate(self, module: Module, expr: ast.expr, depth: int = 0) -> Any:
        """What ``for x in expr`` walks, as a list, or ``UNKNOWN``: the keys of a dict
        (whose values need not be static: ``{"fp8": Fp8Config}``), the members of an
        enum class, the arguments of ``get_args(Literal[...])``, or a static sequence."""
        if depth > 20:
            return UNKNOWN
        if isinstance(expr, ast.Dict):
            keys = [
                self.evaluate(module, k, depth + 1) if k is not None else UNKNOWN for k in expr.keys
            ]
            return UNKNOWN if any(k is UNKNOWN for k in keys) else keys
        if isinstance(expr, (ast.Name, ast.Attribute)):
            found = self.resolve_expr(module, expr)
            if isinstance(found, Resolved) and isinstance(found.node, ast.ClassDef):
                return self.enum_members(found)
            if isinstance(found, Resolved) and isinstance(found.node, ast.expr):
                return self.iterate(found.module, found.node, depth + 1)
            return UNKNOWN
        if isinstance(expr, ast.Call) and len(expr.args) == 1 and not expr.keywords:
            name = _called_name(expr.func)
            if name == "get_args":
                return self.literal_args(module, expr.args[0], depth + 1)
            if name in _ITERATING_CALLS:
                items = self.iterate(module, expr.args[0], depth + 1)
                if items is UNKNOWN or name != "sorted":
                    return items
                try:
                    return sorted(items)
                except TypeError:
                    return UNKNOWN
        value = self.evaluate(module, expr, depth + 1)
        if isinstance(value, dict):
            return list(value)
        if isinstance(value, (list, tuple)):
            return list(value)
        return UNKNOWN

    def literal_args(self, module: Module, expr: ast.expr, depth: int = 0) -> Any:
        """``typing.get_args`` of a ``Literal[...]`` (nested Literals and aliases of
        them flattened, as typing does), or ``UNKNOWN`` for any other type."""
        if depth > 20:
            return UNKNOWN
        if isinstance(expr, (ast.Name, ast.Attribute)):
            found = self.resolve_expr(module, expr)
            if isinstance(found, Resolved) and isinstance(found.node, ast.expr):
                return self.literal_args(found.module, found.node, depth + 1)
            return UNKNOWN
        if not (isinstance(expr, ast.Subscript) and _called_name(expr.value) in _LITERAL_NAMES):
            return UNKNOWN
        elts = expr.slice.elts if isinstance(expr.slice, ast.Tuple) else [expr.slice]
        args: list[Any] = []
        for elt in elts:
            if isinstance(elt, ast.Constant):
                args.append(elt.value)
                continue
            nested = self.literal_args(module, elt, depth + 1)
            if nested is UNKNOWN:
                return UNKNOWN
            args.extend(nested)
        return list(dict.fromkeys(args))  # typing drops repeated arguments

    def enum_members(self, cls: Resolved) -> Any:
        """The members of an ``Enum`` subclass in definition order, or ``UNKNOWN`` when
        ``cls`` is not one (iterating another class is not static)."""
        assert isinstance(cls.node, ast.ClassDef)
        if not any(base.endswith("Enum") for base in self.base_names(cls)):
            return UNKNOWN
        members: list[EnumMember] = []
        for stmt in cls.node.body:
            if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1):
                continue
            target = stmt.targets[0]
            if isinstance(target, ast.Name) and not target.id.startswith("_"):
                members.append(EnumMember(target.id, self.evaluate(cls.module, stmt.value)))
        return members


def _called_name(func: ast.expr) -> str | None:
    """``list`` for ``list(...)``, ``get_args`` for ``typing.get_args(...)``."""
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def _assigned_value(stmt: ast.stmt, name: str) -> ast.expr | None:
    if isinstance(stmt, ast.Assign):
        for target in stmt.targets:
            if isinstance(target, ast.Name) and target.id == name:
                return stmt.value
    if (
        isinstance(stmt, ast.AnnAssign)
        and isinstance(stmt.target, ast.Name)
        and stmt.target.id == name
        and stmt.value is not None
    ):
        return stmt.value
    return None


def _absolute(module: Module, level: int, target: str | None) -> str:
    if level == 0:
        return target or ""
    parts = module.name.split(".")
    base = parts if module.is_package else parts[:-1]
    base = base[: len(base) - (level - 1)] if level > 1 else base
    return ".".join([*base, target] if target else base)


def _index_bindings(module: Module, body: list[ast.stmt]) -> None:
    """Record top-level bindings, looking into ``if``/``try`` blocks (TYPE_CHECKING,
    optional imports), where a later binding wins as it would at run time."""
    for stmt in body:
        if isinstance(stmt, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            module.bindings[stmt.name] = stmt
            module.imports.pop(stmt.name, None)
        elif isinstance(stmt, ast.Assign):
            for target in stmt.targets:
                if isinstance(target, ast.Name):
                    module.bindings[target.id] = stmt.value
                    module.imports.pop(target.id, None)
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            if stmt.value is not None:
                module.bindings[stmt.target.id] = stmt.value
                module.imports.pop(stmt.target.id, None)
        elif isinstance(stmt, ast.Import):
            for alias in stmt.names:
                bound = alias.asname or alias.name.split(".")[0]
                module.bindings.pop(bound, None)
                module.imports[bound] = (alias.name if alias.asname else bound, None)
        elif isinstance(stmt, ast.ImportFrom):
            source = _absolute(module, stmt.level, stmt.module)
            for alias in stmt.names:
                if alias.name == "*":
                    continue
                bound = alias.asname or alias.name
                module.bindings.pop(bound, None)
                module.imports[bound] = (source, alias.name)
        elif isinstance(stmt, ast.If):
            _index_bindings(module, stmt.body)
            _index_bindings(module, stmt.orelse)
        elif isinstance(stmt, ast.Try):
            _index_bindings(module, stmt.body)
            for handler in stmt.handlers:
                _index_bindings(module, handler.body)
