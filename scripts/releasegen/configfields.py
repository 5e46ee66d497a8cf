"""Dataclass fields of vLLM config classes and the argparse kwargs vLLM derives from them.

Mirrors, statically, what ``vllm.engine.arg_utils._compute_kwargs`` does at run time:
the field's annotation is reduced to a set of type "atoms" (after unwrapping
``Optional``/``Union``/``X | Y``/``Annotated``/``SkipValidation`` and type aliases),
and the same decision chain picks JSON / optional-value / ``BooleanOptionalAction`` /
``choices`` / plain value.
"""

from __future__ import annotations

import ast
import contextlib
from dataclasses import dataclass, field
from typing import Any

from releasegen.numbers import human_readable_fields
from releasegen.source import UNKNOWN, Module, ModuleRef, Resolved, WheelSource

# typing wrappers whose first argument is the real type
_TRANSPARENT = {"Annotated", "SkipValidation", "Required", "NotRequired", "Final", "ClassVar"}
_UNION = {"Union"}
_OPTIONAL = {"Optional"}
_LIST = {"list", "List"}
_TUPLE = {"tuple", "Tuple"}
_SET = {"set", "Set", "frozenset", "FrozenSet"}
_DICT = {"dict", "Dict"}
_BUILTIN_ATOMS = {"bool", "int", "float", "str"}
_NUMERIC = {"int", "float", "none"}
_DATACLASS_DECORATORS = {"dataclass", "config"}


@dataclass(frozen=True)
class Atom:
    """One member of a field's flattened type union."""

    kind: str  # bool int float str none dict list tuple set literal dataclass other any
    values: tuple[Any, ...] = ()  # literal options; for list/tuple/set: element atoms
    name: str = ""  # dataclass or other type name


@dataclass
class ConfigField:
    name: str
    annotation: ast.expr
    module: Module
    default: Any  # evaluated default, UNKNOWN when not static, MISSING_DEFAULT when none
    docstring: str
    factory: str | None = None  # name of a default_factory that is a class


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING_DEFAULT: Any = _Missing()


@dataclass
class FieldKwargs:
    """The parts of argparse kwargs kvtool reports, for one config field."""

    default: Any
    help: str
    field_default: Any = None  # the dataclass default; call-site edits leave it alone
    action: str | None = None  # "BooleanOptionalAction", "store_true", "append", class name
    choices: list[Any] | None = None
    known_values: list[Any] | None = None  # Literal options argparse does not enforce
    nargs: Any = None
    json_config: bool = False
    optional_value: bool = False
    deprecated: bool = False
    flags: list[str] = field(default_factory=list)
    # How argparse converts a numeric value: "int", "float", or a human-readable integer
    # parser ("human_readable_int", "human_readable_int_or_auto"); None when not numeric
    # or when kvtool cannot tell (a call site swapped in its own parser).
    value_type: str | None = None
    accepts_none: bool = False  # optional_type(...): "None" and "" parse to None


def is_dataclass_def(source: WheelSource, cls: Resolved) -> bool:
    for c in source.mro(cls):
        assert isinstance(c.node, ast.ClassDef)
        for deco in c.node.decorator_list:
            target = deco.func if isinstance(deco, ast.Call) else deco
            name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
            if name in _DATACLASS_DECORATORS:
                return True
    return False


def class_fields(source: WheelSource, cls: Resolved) -> list[ConfigField]:
    """Dataclass fields in definition order, base classes first (as ``fields()``)."""
    ordered: dict[str, ConfigField] = {}
    for c in reversed(source.mro(cls)):
        assert isinstance(c.node, ast.ClassDef)
        body = c.node.body
        for i, stmt in enumerate(body):
            if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
                continue
            if _is_classvar(stmt.annotation):
                continue
            doc = ""
            if i + 1 < len(body):
                nxt = body[i + 1]
                if (
                    isinstance(nxt, ast.Expr)
                    and isinstance(nxt.value, ast.Constant)
                    and isinstance(nxt.value.value, str)
                ):
                    doc = nxt.value.value
            default, factory = _field_default(source, c.module, stmt.value)
            ordered[stmt.target.id] = ConfigField(
                stmt.target.id, stmt.annotation, c.module, default, doc.strip(), factory
            )
    return list(ordered.values())


def _is_classvar(annotation: ast.expr) -> bool:
    head = annotation.value if isinstance(annotation, ast.Subscript) else annotation
    name = head.attr if isinstance(head, ast.Attribute) else getattr(head, "id", "")
    return name in {"ClassVar", "InitVar"}


def _field_default(
    source: WheelSource, module: Module, value: ast.expr | None
) -> tuple[Any, str | None]:
    if value is None:
        return MISSING_DEFAULT, None
    if isinstance(value, ast.Call):
        func = value.func
        fname = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if fname in {"field", "Field"}:
            kw = {k.arg: k.value for k in value.keywords if k.arg}
            if "default" in kw:
                return source.evaluate(module, kw["default"]), None
            if fname == "Field" and value.args and not isinstance(value.args[0], ast.Starred):
                first = value.args[0]
                if not (isinstance(first, ast.Constant) and first.value is Ellipsis):
                    return source.evaluate(module, first), None
            if "default_factory" in kw:
                return _factory_default(source, module, kw["default_factory"])
            return MISSING_DEFAULT, None
    return source.evaluate(module, value), None


def _factory_default(
    source: WheelSource, module: Module, factory: ast.expr
) -> tuple[Any, str | None]:
    if isinstance(factory, ast.Name) and factory.id in {"list", "tuple", "set"}:
        return [], None
    if isinstance(factory, ast.Name) and factory.id == "dict":
        return {}, None
    if isinstance(factory, ast.Lambda):
        return source.evaluate(module, factory.body), None
    found = source.resolve_expr(module, factory)
    if isinstance(found, Resolved) and isinstance(found.node, ast.ClassDef):
        return UNKNOWN, found.name
    return UNKNOWN, None


def type_atoms(
    source: WheelSource, module: Module, expr: ast.expr | None, depth: int = 0
) -> set[Atom]:
    """Flatten an annotation into the set of types ``get_type_hints`` would yield."""
    if expr is None or depth > 15:
        return {Atom("any")}
    if isinstance(expr, ast.Constant):
        if expr.value is None:
            return {Atom("none")}
        if isinstance(expr.value, str):  # string annotation
            try:
                parsed = ast.parse(expr.value, mode="eval").body
            except SyntaxError:
                return {Atom("other", name=expr.value)}
            return type_atoms(source, module, parsed, depth + 1)
        return {Atom("other")}
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.BitOr):
        return type_atoms(source, module, expr.left, depth + 1) | type_atoms(
            source, module, expr.right, depth + 1
        )
    if isinstance(expr, ast.Subscript):
        head = _head_name(expr.value)
        args = list(expr.slice.elts) if isinstance(expr.slice, ast.Tuple) else [expr.slice]
        if head in _TRANSPARENT:
            return type_atoms(source, module, args[0], depth + 1)
        if head in _UNION:
            out: set[Atom] = set()
            for arg in args:
                out |= type_atoms(source, module, arg, depth + 1)
            return out
        if head in _OPTIONAL:
            return type_atoms(source, module, args[0], depth + 1) | {Atom("none")}
        if head == "Literal":
            values: list[Any] = []
            for arg in args:
                value = source.evaluate(module, arg)
                if value is UNKNOWN:
                    # Literal[KVProducer, KVConsumer]: nested Literals flatten
                    inner = type_atoms(source, module, arg, depth + 1)
                    if not inner or any(a.kind != "literal" for a in inner):
                        return {Atom("other", name="Literal?")}
                    for atom in inner:
                        values.extend(atom.values)
                    continue
                if isinstance(arg, ast.Starred) or isinstance(value, (list, tuple)):
                    values.extend(value if isinstance(value, (list, tuple)) else [value])
                else:
                    values.append(value)
            return {Atom("literal", tuple(dict.fromkeys(values)))}  # typing dedups
        for kind, names in (("list", _LIST), ("tuple", _TUPLE), ("set", _SET)):
            if head in names:
                elems: set[Atom] = set()
                for arg in args:
                    if isinstance(arg, ast.Constant) and arg.value is Ellipsis:
                        continue
                    elems |= type_atoms(source, module, arg, depth + 1)
                return {Atom(kind, tuple(sorted(elems, key=repr)))}
        if head in _DICT:
            return {Atom("dict")}
        return type_atoms(source, module, expr.value, depth + 1)
    if isinstance(expr, (ast.Name, ast.Attribute)):
        name = _head_name(expr)
        if isinstance(expr, ast.Name) and name in _BUILTIN_ATOMS:
            return {Atom(name)}
        if name in _DICT:
            return {Atom("dict")}
        if name in _LIST:
            return {Atom("list")}
        if name in _TUPLE:
            return {Atom("tuple")}
        if name in _SET:
            return {Atom("set")}
        if name == "Any":
            return {Atom("any")}
        found = source.resolve_expr(module, expr)
        if isinstance(found, Resolved):
            node = found.node
            if isinstance(node, ast.ClassDef):
                return {_class_atom(source, found)}
            if isinstance(node, ast.expr):
                return type_atoms(source, found.module, node, depth + 1)
        if isinstance(found, ModuleRef):
            return {Atom("other", name=name)}
        return {Atom("other", name=name)}
    return {Atom("other")}


def _class_atom(source: WheelSource, cls: Resolved) -> Atom:
    names = source.base_names(cls)
    if "TypedDict" in names:
        return Atom("other", name=cls.name)
    if "dict" in names:
        return Atom("dict", name=cls.name)
    if "Enum" in names or "IntEnum" in names or "StrEnum" in names:
        return Atom("other", name=cls.name)
    if is_dataclass_def(source, cls):
        return Atom("dataclass", name=cls.name)
    return Atom("other", name=cls.name)


def _head_name(expr: ast.expr) -> str:
    if isinstance(expr, ast.Attribute):
        return expr.attr
    if isinstance(expr, ast.Name):
        return expr.id
    return ""


@dataclass(frozen=True)
class KwargsRules:
    """Version-dependent details of ``_compute_kwargs`` detected from its source."""

    optional_value_flags: bool  # `bool | str | None` -> nargs="?" (0.21.0+)
    # config field -> human-readable integer parser its flag gets (releasegen.numbers)
    human_readable: dict[str, str] = field(default_factory=dict)


def detect_kwargs_rules(source: WheelSource) -> KwargsRules:
    text = source.text("vllm/engine/arg_utils.py")
    return KwargsRules(
        optional_value_flags="{bool, str, type(None)}" in text,
        human_readable=human_readable_fields(source),
    )


def compute_kwargs(
    source: WheelSource, cls: Resolved, rules: KwargsRules
) -> dict[str, FieldKwargs]:
    """Per-field argparse kwargs, as ``get_kwargs(cls)`` returns them."""
    result: dict[str, FieldKwargs] = {}
    for f in class_fields(source, cls):
        atoms = type_atoms(source, f.module, f.annotation)
        # Subclasses of dict are CLI dicts.
        atoms = {Atom("dict") if a.kind == "dict" else a for a in atoms}
        kinds = {a.kind for a in atoms}
        default = None if f.default in (MISSING_DEFAULT, UNKNOWN) else f.default
        kw = FieldKwargs(default=default, help=f.docstring, field_default=default)
        if "dataclass" in kinds:
            kw.json_config = True
            kw.default = kw.field_default = None
        elif rules.optional_value_flags and kinds == {"bool", "str", "none"}:
            kw.optional_value = True
            kw.nargs = "?"
        elif "bool" in kinds:
            kw.action = "BooleanOptionalAction"
        elif "literal" in kinds:
            _literal_kwargs(kw, atoms)
        elif kinds & {"tuple", "list", "set"}:
            coll = next(a for a in atoms if a.kind in {"tuple", "list", "set"})
            kw.nargs = "+"
            inner = set(coll.values)
            if any(a.kind == "literal" for a in inner):
                _literal_kwargs(kw, inner)
            else:
                _numeric_kwargs(kw, {a.kind for a in inner}, f.name, rules, "none" in kinds)
        else:
            _numeric_kwargs(kw, kinds, f.name, rules, "none" in kinds)
        # dict / str fields take one value with no choices: the defaults of FieldKwargs
        # already say so.
        if "none" in kinds and "bool" not in kinds and kw.choices is not None:
            kw.choices.append(None)
        result[f.name] = kw
    return result


def _numeric_kwargs(
    kw: FieldKwargs, kinds: set[str], name: str, rules: KwargsRules, optional: bool
) -> None:
    """The parser of a purely numeric field (or collection element): every release's
    decision chain reaches its int / float branch for these, whatever order it tests
    the other kinds in; a field that may be None is wrapped in ``optional_type``."""
    if kinds <= _NUMERIC and kinds & {"int", "float"}:
        kw.value_type = rules.human_readable.get(name, "int") if "int" in kinds else "float"
        kw.accepts_none = optional


def _literal_kwargs(kw: FieldKwargs, atoms: set[Atom]) -> None:
    # A Union of several Literals (0.8.5's guided_decoding_backend: V0's | V1's): vLLM's
    # get_kwargs takes whichever its set of hints yields first, which changes with the
    # hash seed; the union is what some run of the release accepts, and the same on
    # every machine that derives the table.
    literals = sorted((a for a in atoms if a.kind == "literal"), key=repr)
    options = list(dict.fromkeys(v for a in literals for v in a.values))
    with contextlib.suppress(TypeError):
        options = sorted(options)
    if any(a.kind == "str" for a in atoms):
        kw.choices = None  # only a metavar: argparse accepts any string
        kw.known_values = options
    else:
        kw.choices = options
