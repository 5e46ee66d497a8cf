"""Rebuild the ``vllm serve`` argument parser statically.

A small abstract interpreter walks the functions vLLM runs to build the parser
(``ServeSubcommand.subparser_init`` -> ``make_arg_parser`` -> ``FrontendArgs.add_cli_args``
-> ``AsyncEngineArgs.add_cli_args`` -> ``EngineArgs.add_cli_args``), tracking only what
matters for the option table: parser objects, the per-config kwargs dicts returned by
``get_kwargs(SomeConfig)`` and their in-place edits, and ``add_argument`` calls.
Both branches of every ``if`` are followed: a flag registered on any path exists.
"""

from __future__ import annotations

import ast
import copy
import re
from dataclasses import dataclass, field
from typing import Any

from releasegen.configfields import FieldKwargs, KwargsRules, compute_kwargs
from releasegen.numbers import numeric_parser
from releasegen.source import UNKNOWN, EnumMember, Module, ModuleRef, Resolved, WheelSource

_MAX_CALL_DEPTH = 12
_CLI_ARGS = "vllm.entrypoints.openai.cli_args"
# Constructors whose result is a parser (argparse's, and vLLM's subclass of it).
_PARSER_CLASSES = {"ArgumentParser", "FlexibleArgumentParser"}

# Help text that declares the option itself deprecated (not merely mentioning the word,
# as "--allow-deprecated-quantization" does).
_DEPRECATION = re.compile(
    r"(\bis\s+(now\s+)?deprecated\b|\bhas\s+been\s+deprecated\b|^\s*\[?deprecated\b"
    r"|\bdeprecated\s+(and|in favou?r|since|since\s+v)\b|\bdeprecated[:;]\s|will\s+be\s+removed)",
    re.IGNORECASE,
)


def _static_sequence(value: Any) -> bool:
    """A non-empty list or tuple every element of which was evaluated (no ``UNKNOWN``
    inside). An empty one is a registry filled at import time by decorators
    (``ReasoningParserManager.reasoning_parsers``), not a parser that accepts nothing."""
    return (
        isinstance(value, (list, tuple))
        and len(value) > 0
        and not any(v is UNKNOWN for v in value)
    )


class Parser:
    """Marker for any argparse parser or argument group."""


@dataclass
class KwargsDict:
    """The dict returned by ``get_kwargs(cls)``: field name -> kwargs."""

    fields: dict[str, FieldKwargs]


@dataclass
class RawOption:
    """One ``add_argument`` call as registered."""

    option_strings: list[str]
    dest: str | None
    action: str | None
    nargs: Any
    choices: Any
    known_values: list[Any] | None
    default: Any
    config_default: Any  # the dataclass default behind **kwargs
    from_config: bool  # registered from get_kwargs(SomeConfig) kwargs
    help: str
    deprecated: bool
    json_config: bool
    optional_value: bool
    value_type: str | None = None  # see FieldKwargs.value_type
    accepts_none: bool = False


@dataclass
class _Frame:
    module: Module
    env: dict[str, Any]
    owner: Resolved | None  # class whose method is running (for super())
    bound_cls: Resolved | None  # what `cls` means in a classmethod
    returned: list[Any] = field(default_factory=list)


class ServeParserBuilder:
    def __init__(self, source: WheelSource, rules: KwargsRules) -> None:
        self.source = source
        self.rules = rules
        self.options: list[RawOption] = []
        self.notes: list[str] = []
        self._kwargs_cache: dict[tuple[str, str], dict[str, FieldKwargs]] = {}
        self._depth = 0

    # -- entry ---------------------------------------------------------------------

    def build(self) -> list[RawOption]:
        """The options of the release's OpenAI server parser, from its newest entry point.

        ``ServeSubcommand.subparser_init`` (``vllm serve``, 0.8.0 on) when the wheel has it;
        before that, ``make_arg_parser`` of ``vllm/entrypoints/openai/cli_args.py``, which
        both ``python -m vllm.entrypoints.openai.api_server`` and the first ``vllm serve``
        (``vllm/scripts.py``) build their parser with.
        """
        cls = self.source.find_class("vllm.entrypoints.cli.serve", "ServeSubcommand")
        found = self.source.method(cls, "subparser_init") if cls is not None else None
        if found is not None:
            owner, func = found
            self._call(owner.module, func, owner, None, {"self": None, "subparsers": Parser()})
            return self.options
        maker = self.source.resolve_attr(_CLI_ARGS, "make_arg_parser")
        if not (isinstance(maker, Resolved) and isinstance(maker.node, ast.FunctionDef)):
            raise RuntimeError(
                "neither ServeSubcommand.subparser_init nor "
                f"{_CLI_ARGS}.make_arg_parser found in the wheel"
            )
        params = [a.arg for a in maker.node.args.posonlyargs + maker.node.args.args]
        self.notes.append(
            f"parser read from {_CLI_ARGS}.make_arg_parser (no ServeSubcommand in this release)"
        )
        self._call(maker.module, maker.node, None, None, {name: Parser() for name in params})
        return self.options

    # -- interpretation ------------------------------------------------------------

    def _call(
        self,
        module: Module,
        func: ast.FunctionDef,
        owner: Resolved | None,
        bound_cls: Resolved | None,
        env: dict[str, Any],
    ) -> Any:
        if self._depth > _MAX_CALL_DEPTH:
            return UNKNOWN
        self._depth += 1
        frame = _Frame(module, dict(env), owner, bound_cls)
        try:
            self._block(frame, func.body)
        finally:
            self._depth -= 1
        tracked = [r for r in frame.returned if isinstance(r, (Parser, KwargsDict))]
        return tracked[-1] if tracked else UNKNOWN

    def _block(self, frame: _Frame, body: list[ast.stmt]) -> None:
        for stmt in body:
            self._stmt(frame, stmt)

    def _stmt(self, frame: _Frame, stmt: ast.stmt) -> None:
        if isinstance(stmt, ast.Assign):
            value = self._expr(frame, stmt.value)
            for target in stmt.targets:
                self._assign(frame, target, value, stmt.value)
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            self._assign(frame, stmt.target, self._expr(frame, stmt.value), stmt.value)
        elif isinstance(stmt, ast.Expr):
            self._expr(frame, stmt.value)
        elif isinstance(stmt, ast.Return) and stmt.value is not None:
            frame.returned.append(self._expr(frame, stmt.value))
        elif isinstance(stmt, ast.Delete):
            for target in stmt.targets:
                self._delete(frame, target)
        elif isinstance(stmt, ast.If):
            self._block(frame, stmt.body)
            self._block(frame, stmt.orelse)
        elif isinstance(stmt, (ast.With, ast.AsyncWith)):
            self._block(frame, stmt.body)
        elif isinstance(stmt, ast.Try):
            self._block(frame, stmt.body)
            self._block(frame, stmt.orelse)
            self._block(frame, stmt.finalbody)
        elif isinstance(stmt, ast.For):
            self._for(frame, stmt)

    def _for(self, frame: _Frame, stmt: ast.For) -> None:
        it = stmt.iter
        # for key, value in some_kwargs.items(): add_argument(f"--{key...}", **value)
        if (
            isinstance(it, ast.Call)
            and isinstance(it.func, ast.Attribute)
            and it.func.attr == "items"
        ):
            owner = self._expr(frame, it.func.value)
            if isinstance(owner, KwargsDict) and isinstance(stmt.target, ast.Tuple):
                k, v = stmt.target.elts
                for name, kwargs in list(owner.fields.items()):
                    self._assign(frame, k, name, None)
                    self._assign(frame, v, kwargs, None)
                    self._block(frame, stmt.body)
                return
        values = self._value(frame, it)
        if isinstance(values, (list, tuple)):
            for item in values:
                self._assign(frame, stmt.target, item, None)
                self._block(frame, stmt.body)
            return
        self.notes.append(
            f"{frame.module.name}:{stmt.lineno}: loop over a non-static iterable not expanded"
        )

    def _assign(self, frame: _Frame, target: ast.expr, value: Any, expr: ast.expr | None) -> None:
        if isinstance(target, ast.Name):
            frame.env[target.id] = value
        elif isinstance(target, (ast.Tuple, ast.List)):
            if isinstance(value, (list, tuple)) and len(value) == len(target.elts):
                for t, v in zip(target.elts, value, strict=False):
                    self._assign(frame, t, v, None)
            else:
                for t in target.elts:
                    self._assign(frame, t, UNKNOWN, None)
        elif isinstance(target, ast.Subscript):
            container = self._expr(frame, target.value)
            key = self._value(frame, target.slice)
            if isinstance(container, FieldKwargs) and isinstance(key, str):
                self._set_kwarg(frame, container, key, expr, value)
            elif (
                isinstance(container, KwargsDict)
                and isinstance(key, str)
                and isinstance(value, FieldKwargs)
            ):
                container.fields[key] = value

    def _set_kwarg(
        self, frame: _Frame, kw: FieldKwargs, key: str, expr: ast.expr | None, value: Any
    ) -> None:
        if key == "default":
            kw.default = None if value is UNKNOWN else value
        elif key == "choices":
            kw.choices = list(value) if _static_sequence(value) else None
        elif key == "action":
            kw.action = self._action_name(frame, expr) if expr is not None else None
            if kw.action == "BooleanOptionalAction" and kw.nargs == "?":
                kw.nargs = None
        elif key == "nargs":
            kw.nargs = value
        elif key == "deprecated":
            kw.deprecated = bool(value) if value is not UNKNOWN else False
        elif key == "help" and isinstance(value, str):
            kw.help = value
        elif key == "type" and expr is not None:
            # A replaced type parser ends JSON-dataclass handling only when it no
            # longer validates the dataclass (e.g. json.loads keeps JSON input).
            text = ast.unparse(expr)
            if "json" not in text and "Dataclass" not in text:
                kw.json_config = False
            kw.value_type, kw.accepts_none = numeric_parser(expr)
        elif key == "flags" and isinstance(value, (list, tuple)):
            kw.flags = [str(v) for v in value]

    def _delete(self, frame: _Frame, target: ast.expr) -> None:
        if not isinstance(target, ast.Subscript):
            return
        container = self._expr(frame, target.value)
        key = self._value(frame, target.slice)
        if isinstance(container, FieldKwargs) and isinstance(key, str):
            if key == "choices":
                container.choices = None
            elif key == "nargs":
                container.nargs = None
            elif key == "default":
                container.default = None
        elif isinstance(container, KwargsDict) and isinstance(key, str):
            container.fields.pop(key, None)

    # -- expressions ---------------------------------------------------------------

    def _value(self, frame: _Frame, expr: ast.expr) -> Any:
        """Evaluate an expression to a plain Python value (local names first)."""
        if isinstance(expr, ast.Name) and expr.id in frame.env:
            return frame.env[expr.id]
        if isinstance(expr, ast.JoinedStr):
            parts: list[str] = []
            for part in expr.values:
                if isinstance(part, ast.Constant):
                    parts.append(str(part.value))
                elif isinstance(part, ast.FormattedValue):
                    inner = self._value(frame, part.value)
                    if inner is UNKNOWN:
                        return UNKNOWN
                    parts.append(str(inner))
            return "".join(parts)
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute):
            owner = self._value(frame, expr.func.value)
            args = [self._value(frame, a) for a in expr.args]
            if isinstance(owner, str) and UNKNOWN not in args:
                method = expr.func.attr
                if method in {"replace", "lower", "upper", "strip", "removeprefix"}:
                    return getattr(owner, method)(*args)
            if isinstance(owner, FieldKwargs) and expr.func.attr in {"pop", "get"}:
                key = args[0] if args else None
                if key == "flags":
                    flags = list(owner.flags)
                    if expr.func.attr == "pop":
                        owner.flags = []
                    return flags
                return UNKNOWN
        if isinstance(expr, (ast.Tuple, ast.List)):
            items: list[Any] = []
            for elt in expr.elts:
                if isinstance(elt, ast.Starred):
                    # [*QUANTIZATION_METHODS, None]: spliced in when static, and the whole
                    # list is unknown when not (a partial list would reject real values)
                    inner = self._iterable(frame, elt.value)
                    if inner is UNKNOWN:
                        return UNKNOWN
                    items.extend(inner)
                else:
                    items.append(self._value(frame, elt))
            return tuple(items) if isinstance(expr, ast.Tuple) else items
        if isinstance(expr, ast.ListComp):
            return self._comprehension(frame, expr)
        if isinstance(expr, ast.Attribute):
            owner = self._value(frame, expr.value)
            if isinstance(owner, EnumMember) and expr.attr in {"name", "value"}:
                return getattr(owner, expr.attr)
        if isinstance(expr, ast.Subscript):
            return self._expr(frame, expr)
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
            left, right = self._value(frame, expr.left), self._value(frame, expr.right)
            if isinstance(left, str) and isinstance(right, str):
                return left + right
        return self.source.evaluate(frame.module, expr)

    def _iterable(self, frame: _Frame, expr: ast.expr) -> Any:
        """What ``for x in expr`` walks (a list), or ``UNKNOWN``; local names first."""
        if isinstance(expr, ast.Name) and expr.id in frame.env:
            local = frame.env[expr.id]
            if isinstance(local, dict):
                return list(local)
            return list(local) if isinstance(local, (list, tuple)) else UNKNOWN
        if isinstance(expr, (ast.List, ast.Tuple, ast.ListComp)):
            value = self._value(frame, expr)
            return list(value) if isinstance(value, (list, tuple)) else UNKNOWN
        return self.source.iterate(frame.module, expr)

    def _comprehension(self, frame: _Frame, comp: ast.ListComp) -> Any:
        """``[f.value for f in LoadFormat]`` over a static iterable (an enum, a literal,
        a dict's keys), one ``for`` clause, no filters; anything else is ``UNKNOWN``."""
        if len(comp.generators) != 1:
            return UNKNOWN
        gen = comp.generators[0]
        if gen.ifs or gen.is_async or not isinstance(gen.target, ast.Name):
            return UNKNOWN
        items = self._iterable(frame, gen.iter)
        if items is UNKNOWN:
            return UNKNOWN
        out: list[Any] = []
        for item in items:
            inner = _Frame(
                frame.module, {**frame.env, gen.target.id: item}, frame.owner, frame.bound_cls
            )
            value = self._value(inner, comp.elt)
            if value is UNKNOWN or isinstance(value, EnumMember):
                return UNKNOWN
            out.append(value)
        return out

    def _expr(self, frame: _Frame, expr: ast.expr) -> Any:
        if isinstance(expr, ast.Name):
            if expr.id in frame.env:
                return frame.env[expr.id]
            return self._value(frame, expr)
        if isinstance(expr, ast.Subscript):
            container = self._expr(frame, expr.value)
            key = self._value(frame, expr.slice)
            if isinstance(container, KwargsDict) and isinstance(key, str):
                return container.fields.get(key, UNKNOWN)
            if isinstance(container, FieldKwargs) and key == "choices":
                return container
            if isinstance(container, FieldKwargs) and key == "default":
                return container.default
            return UNKNOWN
        if isinstance(expr, ast.Call):
            return self._call_expr(frame, expr)
        return self._value(frame, expr)

    def _call_expr(self, frame: _Frame, call: ast.Call) -> Any:
        func = call.func
        if isinstance(func, ast.Attribute):
            attr = func.attr
            if attr == "add_argument":
                owner = self._expr(frame, func.value)
                if isinstance(owner, Parser):
                    self._add_argument(frame, call)
                    return UNKNOWN
            if attr in {"add_argument_group", "add_mutually_exclusive_group", "add_parser"}:
                return Parser()
            if attr in _PARSER_CLASSES:  # argparse.ArgumentParser(...)
                return Parser()
            # kwargs["x"]["choices"].remove(v) / .append(v)
            if attr in {"remove", "append"} and isinstance(func.value, ast.Subscript):
                holder = self._expr(frame, func.value.value)
                key = self._value(frame, func.value.slice)
                if isinstance(holder, FieldKwargs) and key == "choices" and call.args:
                    value = self._value(frame, call.args[0])
                    if holder.choices is not None and value is not UNKNOWN:
                        if attr == "remove" and value in holder.choices:
                            holder.choices.remove(value)
                        elif attr == "append":
                            holder.choices.append(value)
                    return UNKNOWN
            if attr in {"pop", "get"}:
                owner = self._expr(frame, func.value)
                if isinstance(owner, FieldKwargs):
                    return self._value(frame, call)
                if isinstance(owner, KwargsDict) and attr == "pop" and call.args:
                    key = self._value(frame, call.args[0])
                    return owner.fields.pop(key, UNKNOWN) if isinstance(key, str) else UNKNOWN
            if attr == "update":
                owner = self._expr(frame, func.value)
                if isinstance(owner, FieldKwargs) and call.args:
                    self._update_kwargs(frame, owner, call.args[0])
                    return UNKNOWN
        if isinstance(func, ast.Name) and func.id in _PARSER_CLASSES:
            return Parser()
        if isinstance(func, ast.Name) and func.id == "get_kwargs" and call.args:
            cls = self._class_of(frame, call.args[0])
            if cls is not None:
                return KwargsDict(self._kwargs_for(cls))
            self.notes.append(f"{frame.module.name}:{call.lineno}: get_kwargs on unresolved class")
            return UNKNOWN
        args = [self._expr(frame, a) for a in call.args]
        kwargs = {k.arg: self._expr(frame, k.value) for k in call.keywords if k.arg}
        if not any(isinstance(v, (Parser, KwargsDict)) for v in [*args, *kwargs.values()]):
            return UNKNOWN
        return self._invoke(frame, func, args, kwargs)

    def _update_kwargs(self, frame: _Frame, kw: FieldKwargs, arg: ast.expr) -> None:
        if isinstance(arg, ast.Dict):
            for k, v in zip(arg.keys, arg.values, strict=False):
                key = self._value(frame, k) if k is not None else None
                if isinstance(key, str):
                    self._set_kwarg(frame, kw, key, v, self._value(frame, v))

    def _class_of(self, frame: _Frame, expr: ast.expr) -> Resolved | None:
        if isinstance(expr, ast.Name) and expr.id == "cls" and frame.bound_cls is not None:
            return frame.bound_cls
        if isinstance(expr, ast.Name) and isinstance(frame.env.get(expr.id), Resolved):
            value = frame.env[expr.id]
            return value if isinstance(value, Resolved) else None
        found = self.source.resolve_expr(frame.module, expr)
        if isinstance(found, Resolved) and isinstance(found.node, ast.ClassDef):
            return found
        return None

    def _kwargs_for(self, cls: Resolved) -> dict[str, FieldKwargs]:
        key = (cls.module.name, cls.name)
        if key not in self._kwargs_cache:
            self._kwargs_cache[key] = compute_kwargs(self.source, cls, self.rules)
        # get_kwargs returns a deep copy: call sites edit their own copy
        return copy.deepcopy(self._kwargs_cache[key])

    def _invoke(
        self, frame: _Frame, func: ast.expr, args: list[Any], kwargs: dict[str, Any]
    ) -> Any:
        target = self._resolve_callable(frame, func)
        if target is None:
            self.notes.append(
                f"{frame.module.name}: call to {ast.unparse(func)} with a parser not followed"
            )
            return next((a for a in args if isinstance(a, Parser)), UNKNOWN)
        module, fdef, owner, bound_cls, implicit_first = target
        params = [a.arg for a in fdef.args.posonlyargs + fdef.args.args]
        env: dict[str, Any] = {}
        if implicit_first and params:
            env[params[0]] = bound_cls
            params = params[1:]
        for name, value in zip(params, args, strict=False):
            env[name] = value
        env.update(kwargs)
        result = self._call(module, fdef, owner, bound_cls, env)
        if result is UNKNOWN:
            return next((a for a in args if isinstance(a, Parser)), UNKNOWN)
        return result

    def _resolve_callable(
        self, frame: _Frame, func: ast.expr
    ) -> tuple[Module, ast.FunctionDef, Resolved | None, Resolved | None, bool] | None:
        if isinstance(func, ast.Attribute):
            method = func.attr
            receiver = func.value
            cls: Resolved | None = None
            start_after: Resolved | None = None
            if (
                isinstance(receiver, ast.Call)
                and isinstance(receiver.func, ast.Name)
                and receiver.func.id == "super"
            ):
                cls, start_after = frame.bound_cls or frame.owner, frame.owner
            elif isinstance(receiver, ast.Name) and receiver.id == "cls":
                cls = frame.bound_cls
            else:
                found = self.source.resolve_expr(frame.module, receiver)
                if isinstance(found, Resolved) and isinstance(found.node, ast.ClassDef):
                    cls = found
                elif isinstance(found, ModuleRef):
                    res = self.source.resolve(found.module, method)
                    if isinstance(res, Resolved) and isinstance(res.node, ast.FunctionDef):
                        return res.module, res.node, None, None, False
            if cls is None:
                return None
            mro = self.source.mro(cls)
            if start_after is not None:
                keys = [(c.module.name, c.name) for c in mro]
                key = (start_after.module.name, start_after.name)
                mro = mro[keys.index(key) + 1 :] if key in keys else mro[1:]
            for c in mro:
                assert isinstance(c.node, ast.ClassDef)
                for stmt in c.node.body:
                    if isinstance(stmt, ast.FunctionDef) and stmt.name == method:
                        decos = {getattr(d, "id", "") for d in stmt.decorator_list}
                        implicit = "staticmethod" not in decos
                        return c.module, stmt, c, cls, implicit
            return None
        if isinstance(func, ast.Name):
            found = self.source.resolve(frame.module, func.id)
            if isinstance(found, Resolved) and isinstance(found.node, ast.FunctionDef):
                return found.module, found.node, None, None, False
        return None

    def _action_name(self, frame: _Frame, expr: ast.expr) -> str:
        if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
            return expr.value
        if isinstance(expr, ast.Attribute):
            return expr.attr
        if isinstance(expr, ast.Name):
            local = frame.env.get(expr.id)
            if isinstance(local, str):
                return local
            return expr.id
        return ast.unparse(expr)

    def _add_argument(self, frame: _Frame, call: ast.Call) -> None:
        names: list[str] = []
        for arg in call.args:
            if isinstance(arg, ast.Starred):
                value = self._value(frame, arg.value)
                if isinstance(value, (list, tuple)):
                    names.extend(str(v) for v in value)
                continue
            value = self._value(frame, arg)
            if value is UNKNOWN or not isinstance(value, str):
                self.notes.append(
                    f"{frame.module.name}:{call.lineno}: option name not static: {ast.unparse(arg)}"
                )
                return
            names.append(value)
        if not names or not all(n.startswith("-") for n in names):
            return  # positional (model_tag)
        base: FieldKwargs | None = None
        explicit: dict[str, ast.expr] = {}
        for kw in call.keywords:
            if kw.arg is None and isinstance(kw.value, ast.Dict):
                # **{**cache_kwargs["x"], "default": None}
                for key_expr, value_expr in zip(kw.value.keys, kw.value.values, strict=False):
                    if key_expr is None:
                        spread = self._expr(frame, value_expr)
                        if isinstance(spread, FieldKwargs):
                            base = spread
                    else:
                        key = self._value(frame, key_expr)
                        if isinstance(key, str):
                            explicit[key] = value_expr
            elif kw.arg is None:
                spread = self._expr(frame, kw.value)
                if isinstance(spread, FieldKwargs):
                    base = spread
            else:
                explicit[kw.arg] = kw.value
        action = base.action if base else None
        nargs = base.nargs if base else None
        choices: Any = list(base.choices) if base and base.choices is not None else None
        known_values = list(base.known_values) if base and base.known_values else None
        default = base.default if base else None
        help_text = base.help if base else ""
        deprecated = base.deprecated if base else False
        json_config = base.json_config if base else False
        optional_value = base.optional_value if base else False
        value_type = base.value_type if base else None
        accepts_none = base.accepts_none if base else False
        dest = None
        for key, expr in explicit.items():
            value = self._value(frame, expr)
            if key == "action":
                action = self._action_name(frame, expr)
                optional_value = False
            elif key == "nargs":
                nargs = value
                optional_value = value == "?"
            elif key == "choices":
                choices = list(value) if _static_sequence(value) else UNKNOWN
                known_values = None
            elif key == "default":
                default = None if value is UNKNOWN else value
            elif key == "help":
                help_text = value if isinstance(value, str) else help_text
            elif key == "deprecated":
                deprecated = value is True
            elif key == "dest":
                dest = value if isinstance(value, str) else None
            elif key == "type":
                text = ast.unparse(expr)
                json_config = json_config and ("json" in text or "Dataclass" in text)
                value_type, accepts_none = numeric_parser(expr)
        if nargs == "?":
            optional_value = True
        if action and "deprecat" in action.lower():
            deprecated = True
        if not deprecated and _DEPRECATION.search(help_text or ""):
            deprecated = True
        self.options.append(
            RawOption(
                option_strings=names,
                dest=dest,
                action=action,
                nargs=nargs,
                choices=choices,
                known_values=known_values,
                default=default,
                config_default=base.field_default if base else None,
                from_config=base is not None,
                help=help_text or "",
                deprecated=deprecated,
                json_config=json_config,
                optional_value=optional_value,
                value_type=value_type,
                accepts_none=accepts_none,
            )
        )
