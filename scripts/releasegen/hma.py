"""How one release decides the hybrid KV cache manager (HMA), read from ``VllmConfig``.

The decision lives in ``VllmConfig.__post_init__`` (``vllm/config/vllm.py``; the
package ``vllm/config/__init__.py`` up to 0.11). Read statically, it answers:

- does a ``--kv-transfer-config`` turn HMA off even when the flag was passed
  (``forces_off``: the plain-bool era, the check sits under
  ``if not ...disable_hybrid_kv_cache_manager``), only when the flag is unset
  (``when_unset``: under ``if ... is None``), or only when the connector lacks
  ``SupportsHMA`` (``per_connector``: a ``supports_hma`` / ``supports_hma_config`` call
  in that branch);
- is ``--kv-offloading-*`` turned into a connector (``_post_init_kv_transfer_config()``)
  before that decision, so the decision sees the offload connector;
- does the warning name the connector, and does forcing HMA on where it is unsupported
  raise ("explicitly enabled").
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import Literal

from kvtool.releases.model import HmaDecision
from releasegen.source import WheelSource

_CONFIG_MODULES = ("vllm.config.vllm", "vllm.config")
_FLAG = "disable_hybrid_kv_cache_manager"
_CONVERT = "_post_init_kv_transfer_config"


def _post_init(source: WheelSource) -> tuple[str, ast.FunctionDef] | None:
    for dotted in _CONFIG_MODULES:
        module = source.module(dotted)
        cls = module.bindings.get("VllmConfig") if module is not None else None
        if isinstance(cls, ast.ClassDef):
            for node in cls.body:
                if isinstance(node, ast.FunctionDef) and node.name == "__post_init__":
                    return module.path if module else dotted, node
    return None


def _ifs_with_parents(
    body: list[ast.stmt], parents: tuple[ast.If, ...] = ()
) -> Iterator[tuple[ast.If, tuple[ast.If, ...]]]:
    for stmt in body:
        if isinstance(stmt, ast.If):
            yield stmt, parents
            yield from _ifs_with_parents(stmt.body, (*parents, stmt))
            yield from _ifs_with_parents(stmt.orelse, (*parents, stmt))
        elif isinstance(stmt, (ast.With, ast.For, ast.Try)):
            yield from _ifs_with_parents(stmt.body, parents)


def _turns_off(node: ast.If) -> bool:
    """The branch sets the flag (or the ``need_disable_...`` local) to True."""
    for stmt in ast.walk(ast.Module(body=node.body, type_ignores=[])):
        if (
            isinstance(stmt, ast.Assign)
            and isinstance(stmt.value, ast.Constant)
            and stmt.value.value is True
            and any(_FLAG in ast.unparse(t) for t in stmt.targets)
        ):
            return True
    return False


def _strings(node: ast.AST) -> str:
    return " ".join(
        n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)
    )


def hma_decision(source: WheelSource) -> HmaDecision | None:
    """The release's HMA decision, or None when VllmConfig has no HMA block."""
    found = _post_init(source)
    if found is None:
        return None
    member, func = found
    transfer_branch: tuple[ast.If, tuple[ast.If, ...]] | None = None
    for node, parents in _ifs_with_parents(func.body):
        if "kv_transfer_config is not None" in ast.unparse(node.test) and _turns_off(node):
            transfer_branch = (node, parents)
            break
    if transfer_branch is None:
        return None
    node, parents = transfer_branch
    guards = [ast.unparse(p.test) for p in parents]
    calls = {
        n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", "")
        for n in ast.walk(node)
        if isinstance(n, ast.Call)
    }
    mode: Literal["forces_off", "when_unset", "per_connector"]
    if calls & {"supports_hma", "supports_hma_config"}:
        mode = "per_connector"
    elif any(f"{_FLAG} is None" in g for g in guards):
        mode = "when_unset"
    else:
        mode = "forces_off"
    convert_line = next(
        (
            n.lineno
            for n in ast.walk(func)
            if isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and n.func.attr == _CONVERT
        ),
        None,
    )
    decision_line = parents[0].lineno if parents else node.lineno
    text = _strings(node)
    return HmaDecision(
        mode=mode,
        offload_converted_first=convert_line is not None and convert_line < decision_line,
        warning_names_connector="connector %s" in text,
        forced_on_conflict_raises="explicitly enabled" in _strings(func),
        source=f"{member}:{node.lineno}",
    )
