"""How a release parses numeric flag values: which fields take human-readable integers.

``_compute_kwargs`` in ``vllm/engine/arg_utils.py`` gives int-typed config fields the
parser ``int``, except for a few named fields that get ``human_readable_int`` ("32k",
"1G") or ``human_readable_int_or_auto`` (that, plus "auto" and -1). The names are
written in its ``contains_type(type_hints, int)`` branch as ``name == "x"`` tests and
``name in {...}`` / ``name in SOME_SET`` tests; the suffixes the parser accepts are the
keys of its multiplier dicts. Both changed across releases, so both are read here.
"""

from __future__ import annotations

import ast

from releasegen.source import WheelSource

ARG_UTILS = "vllm/engine/arg_utils.py"
# Where human_readable_int has lived (arg_utils up to 0.10.x, then vllm.utils).
_PARSER_HOMES = (ARG_UTILS, "vllm/utils/argparse_utils.py", "vllm/utils/__init__.py")
HUMAN_PARSERS = ("human_readable_int", "human_readable_int_or_auto")


def human_readable_fields(source: WheelSource) -> dict[str, str]:
    """Config field name -> the human-readable parser its flag gets at this release."""
    tree = ast.parse(source.text(ARG_UTILS))
    compute = next(
        (
            node
            for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef) and node.name == "_compute_kwargs"
        ),
        None,
    )
    if compute is None:
        return {}
    found: dict[str, str] = {}
    for node in ast.walk(compute):
        if isinstance(node, ast.If) and _tests_int_type(node.test):
            constants = _set_constants(node.body)
            _collect(node.body, constants, found)
    return found


def human_int_suffixes(source: WheelSource) -> tuple[str, ...]:
    """The unit suffixes ``human_readable_int`` multiplies by, e.g. ("k", "m", "K", ...)."""
    for member in _PARSER_HOMES:
        if member not in source.members:
            continue
        for node in ast.walk(ast.parse(source.text(member))):
            if isinstance(node, ast.FunctionDef) and node.name == "human_readable_int":
                keys: list[str] = []
                for inner in ast.walk(node):
                    if isinstance(inner, ast.Dict):
                        keys += [
                            k.value
                            for k in inner.keys
                            if isinstance(k, ast.Constant) and isinstance(k.value, str)
                        ]
                return tuple(keys)
    return ()


def _tests_int_type(test: ast.expr) -> bool:
    """``contains_type(type_hints, int)``."""
    return (
        isinstance(test, ast.Call)
        and isinstance(test.func, ast.Name)
        and test.func.id == "contains_type"
        and len(test.args) == 2
        and isinstance(test.args[1], ast.Name)
        and test.args[1].id == "int"
    )


def _set_constants(body: list[ast.stmt]) -> dict[str, tuple[str, ...]]:
    """Local ``NAME = {"a", "b"}`` (or tuple/list) assignments in the branch."""
    constants: dict[str, tuple[str, ...]] = {}
    for stmt in body:
        if (
            isinstance(stmt, ast.Assign)
            and len(stmt.targets) == 1
            and isinstance(stmt.targets[0], ast.Name)
        ):
            names = _string_elements(stmt.value)
            if names is not None:
                constants[stmt.targets[0].id] = names
    return constants


def _string_elements(expr: ast.expr) -> tuple[str, ...] | None:
    if isinstance(expr, (ast.Set, ast.Tuple, ast.List)) and all(
        isinstance(e, ast.Constant) and isinstance(e.value, str) for e in expr.elts
    ):
        return tuple(e.value for e in expr.elts)  # type: ignore[attr-defined]
    return None


def _collect(
    body: list[ast.stmt], constants: dict[str, tuple[str, ...]], found: dict[str, str]
) -> None:
    for stmt in body:
        if not isinstance(stmt, ast.If):
            continue
        names = _names_tested(stmt.test, constants)
        parser = _assigned_parser(stmt.body)
        if names and parser:
            for name in names:
                found.setdefault(name, parser)
        _collect(stmt.orelse, constants, found)


def _names_tested(test: ast.expr, constants: dict[str, tuple[str, ...]]) -> tuple[str, ...]:
    """Field names a ``name == "x"`` / ``name in {...}`` / ``name in CONST`` test admits."""
    if not (
        isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Name)
        and test.left.id == "name"
        and len(test.ops) == 1
    ):
        return ()
    right = test.comparators[0]
    if isinstance(test.ops[0], ast.Eq) and isinstance(right, ast.Constant):
        return (str(right.value),)
    if isinstance(test.ops[0], ast.In):
        if isinstance(right, ast.Name):
            return constants.get(right.id, ())
        return _string_elements(right) or ()
    return ()


def _assigned_parser(body: list[ast.stmt]) -> str | None:
    """The human-readable parser ``kwargs[name]["type"] = ...`` assigns in ``body``."""
    for stmt in body:
        if (
            isinstance(stmt, ast.Assign)
            and isinstance(stmt.value, ast.Name)
            and stmt.value.id in HUMAN_PARSERS
        ):
            target = stmt.targets[0]
            if isinstance(target, ast.Subscript) and ast.unparse(target.slice) in {
                "'type'",
                '"type"',
            }:
                return stmt.value.id
    return None


def numeric_parser(expr: ast.expr) -> tuple[str | None, bool]:
    """``(parser, accepts_none)`` of an argparse ``type=`` expression.

    ``int``, ``float`` and the human-readable parsers are named; ``optional_type(X)`` is
    X that also takes "None"; anything else (``str``, lambdas, JSON parsers) is None.
    """
    if isinstance(expr, ast.Name) and expr.id in ("int", "float", *HUMAN_PARSERS):
        return expr.id, False
    if (
        isinstance(expr, ast.Call)
        and isinstance(expr.func, ast.Name)
        and expr.func.id == "optional_type"
        and len(expr.args) == 1
    ):
        parser, _ = numeric_parser(expr.args[0])
        return parser, parser is not None
    return None, False
