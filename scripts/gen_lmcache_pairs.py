#!/usr/bin/env python3
"""Generate ``rules/lmcache/vllm_pairs.json``: vLLM/LMCache release pairs whose connector
cannot start, read from both projects' released wheels.

    python scripts/gen_lmcache_pairs.py            # every tabled vLLM x LMCache release
    python scripts/gen_lmcache_pairs.py --check    # exit 1 when the table drifts
    python scripts/gen_lmcache_pairs.py --check --versions 0.21.0   # one vLLM release

vLLM and LMCache wheels are fetched like the release and LMCache tables
(``.cache/wheels/``, ``.cache/lmcache/``) and read with ``ast``; nothing is imported.
For each pair and each vLLM connector that loads LMCache code, the script follows what
Python does when vLLM constructs the connector:

- ``LMCacheMPConnector`` (``vllm/.../v1/lmcache_mp_connector.py``): every module-level
  ``from lmcache.X import Y`` must find ``Y`` in LMCache's ``X`` (inside a ``try``, a
  failure runs the ``except ImportError`` branch, whose imports must then succeed). Where
  vLLM prefers LMCache's own ``lmcache.integration.vllm.lmcache_mp_connector`` (a
  ``try``/``except ImportError`` around that import) and that module's own top-level
  imports resolve, LMCache's class is used and nothing else is checked. Otherwise vLLM's
  class runs: a ``try`` group importing LMCache's adapter classes uses LMCache's classes
  when every name resolves (vLLM's copies when not), and then every call vLLM makes to
  them (``ParallelStrategy(...)``, ``LMCacheMPSchedulerAdapter(...)``) must fit their
  parameters (dataclass fields or ``__init__``): too many positional arguments, an
  unknown keyword or a missing required parameter is a ``TypeError`` at start-up.
- ``LMCacheConnectorV1`` (``lmcache_connector.py``, without ``use_native``): it imports
  LMCache's ``lmcache.integration.vllm.vllm_v1_adapter``; that module's top-level
  ``from vllm.X import Y`` (and those of the LMCache modules it imports at top level)
  must resolve in vLLM (the same way).

A name counts as present when the module binds it at top level anywhere (also inside
``if``/``try``) or the module has a ``__getattr__`` or a star import: only certain
failures are tabled. Only failing pairs are written, with the reason and the source
line; each wheel's file name and sha256 are recorded.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.version import Version

sys.path.insert(0, str(Path(__file__).resolve().parent))
from releasegen import wheels
from releasegen.build import sha256_of

_REPO = Path(__file__).resolve().parent.parent
GENERATOR_VERSION = 1
_V1_DIR = "vllm/distributed/kv_transfer/kv_connector/v1/"
MP_MODULE = _V1_DIR + "lmcache_mp_connector.py"
V1_MODULE = _V1_DIR + "lmcache_connector.py"
LMCACHE_MP_CONNECTOR = "lmcache.integration.vllm.lmcache_mp_connector"
LMCACHE_V1_ADAPTER = "lmcache.integration.vllm.vllm_v1_adapter"


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class Package:
    """The Python source of one wheel, each module parsed when first asked for."""

    def __init__(self, name: str, version: str, wheel: Path) -> None:
        self.name = name  # "vllm" or "lmcache"
        self.version = version
        self.wheel = wheel
        self.paths: dict[str, str] = {}  # module -> path in the wheel
        self._trees: dict[str, ast.Module | None] = {}
        with zipfile.ZipFile(wheel) as archive:
            for path in archive.namelist():
                if path.startswith(name + "/") and path.endswith(".py"):
                    module = path[: -len(".py")].removesuffix("/__init__").replace("/", ".")
                    self.paths[module] = path

    def tree(self, module: str) -> ast.Module | None:
        if module not in self._trees:
            path = self.paths.get(module)
            parsed = None
            if path is not None:
                with zipfile.ZipFile(self.wheel) as archive:
                    text = archive.read(path).decode("utf-8", "replace")
                try:
                    parsed = ast.parse(text)
                except SyntaxError:
                    parsed = None
            self._trees[module] = parsed
        return self._trees[module]

    def binds(self, module: str, name: str) -> bool:
        """Whether ``from module import name`` finds something (True for other packages)."""
        if module.split(".")[0] != self.name:
            return True
        if f"{module}.{name}" in self.paths:  # a submodule
            return True
        tree = self.tree(module)
        if tree is None:
            return module in self.paths  # present but unreadable: not a certain failure
        return name in _top_level_names(tree)


def _top_level_names(tree: ast.Module) -> set[str] | _Everything:
    names: set[str] = set()
    for node in _module_level(tree.body):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
            if node.name == "__getattr__":
                return _Everything()
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                names |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
        elif isinstance(node, ast.Import | ast.ImportFrom):
            for alias in node.names:
                if alias.name == "*":
                    return _Everything()
                names.add(alias.asname or alias.name.split(".")[0])
    return names


class _Everything(set[str]):
    """A module whose names cannot be listed (``__getattr__``, star import)."""

    def __contains__(self, item: object) -> bool:
        return True


def _module_level(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Statements run at import, inside ``if``/``try``/``with`` blocks too."""
    for node in body:
        yield node
        if isinstance(node, ast.If | ast.With):
            yield from _module_level(node.body)
            yield from _module_level(getattr(node, "orelse", []))
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody):
                yield from _module_level(block)
            for handler in node.handlers:
                yield from _module_level(handler.body)


def _plain_imports(tree: ast.Module, package: str) -> Iterator[ast.ImportFrom]:
    """Module-level ``from package... import`` outside ``try`` and ``if`` blocks."""
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == package:
            yield node


def _run_imports(body: list[ast.stmt], package: str, source: Package) -> tuple[str, int] | None:
    """The first import of ``package`` that fails when ``body`` runs, with its line:
    plain module-level imports, and ``try`` blocks whose ``except`` branch runs (and may
    fail in turn) when an import in the ``try`` fails."""
    for node in body:
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == package:
            missing = _missing(node, source)
            if missing is not None:
                return missing, node.lineno
        elif (
            isinstance(node, ast.Try)
            and node.handlers
            and _run_imports(node.body, package, source) is not None
        ):
            failed = _run_imports(node.handlers[0].body, package, source)
            if failed is not None:
                return failed
    return None


def _missing(node: ast.ImportFrom, source: Package) -> str | None:
    """The first name of ``node`` that ``source`` does not provide."""
    module = node.module or ""
    for alias in node.names:
        if not source.binds(module, alias.name):
            return f"from {module} import {alias.name}"
    return None


@dataclass(frozen=True)
class Problem:
    connector: str
    reason: str
    where: str  # "<path in the wheel>:<line>" of the failing import or call

    def as_row(self, vllm: str, lmcache: str) -> dict[str, str]:
        return {
            "vllm": vllm,
            "lmcache": lmcache,
            "connector": self.connector,
            "reason": self.reason,
            "where": self.where,
        }


def _import_problem(
    connector: str, tree_path: str, tree: ast.Module, package: str, source: Package
) -> Problem | None:
    failed = _run_imports(tree.body, package, source)
    if failed is None:
        return None
    missing, line = failed
    module = missing.split()[1]
    return Problem(
        connector,
        f"ImportError: {source.name} {source.version} has no `{missing.split()[-1]}` "
        f"in `{module}` ({missing})",
        f"{tree_path}:{line}",
    )


def _lmcache_closure(lmcache: Package, start: str) -> list[str]:
    """``start`` and every lmcache module it imports at module level, transitively."""
    seen: list[str] = []
    stack = [start]
    while stack:
        module = stack.pop()
        tree = lmcache.tree(module)
        if module in seen or tree is None:
            continue
        seen.append(module)
        for node in _plain_imports(tree, "lmcache"):
            target = node.module or ""
            stack.append(target)
            stack.extend(f"{target}.{a.name}" for a in node.names)
    return seen


def _vllm_imports_problem(
    connector: str, vllm: Package, lmcache: Package, start: str
) -> Problem | None:
    for module in _lmcache_closure(lmcache, start):
        tree = lmcache.tree(module)
        assert tree is not None  # the closure holds parsed modules only
        problem = _import_problem(connector, lmcache.paths[module], tree, "vllm", vllm)
        if problem is not None:
            return problem
    return None


def _prefers_lmcache_class(tree: ast.Module) -> bool:
    """vLLM tries LMCache's own ``LMCacheMPConnector`` first (and falls back on ImportError)."""
    return any(
        isinstance(node, ast.ImportFrom) and node.module == LMCACHE_MP_CONNECTOR
        for node in ast.walk(tree)
    )


def _adapter_group(tree: ast.Module) -> ast.ImportFrom | None:
    """The ``try``-guarded import of LMCache's adapter classes (vLLM's copies on failure)."""
    for node in tree.body:
        if isinstance(node, ast.Try):
            for inner in node.body:
                if isinstance(inner, ast.ImportFrom) and (inner.module or "").startswith(
                    "lmcache."
                ):
                    return inner
    return None


@dataclass(frozen=True)
class Signature:
    params: tuple[str, ...]
    required: frozenset[str]
    var_positional: bool = False
    var_keyword: bool = False


def _signature(cls: ast.ClassDef) -> Signature | None:
    """``__init__``'s parameters, or a dataclass's fields (annotated, in order)."""
    for node in cls.body:
        if isinstance(node, ast.FunctionDef) and node.name == "__init__":
            args = node.args
            positional = [a.arg for a in args.args[1:]]
            defaults = len(args.defaults)
            required = set(positional[: len(positional) - defaults] if defaults else positional)
            required |= {
                a.arg for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is None
            }
            return Signature(
                (*positional, *(a.arg for a in args.kwonlyargs)),
                frozenset(required),
                args.vararg is not None,
                args.kwarg is not None,
            )
    if not any(
        (isinstance(d, ast.Name) and d.id == "dataclass")
        or (isinstance(d, ast.Call) and isinstance(d.func, ast.Name) and d.func.id == "dataclass")
        for d in cls.decorator_list
    ):
        return None
    fields = [
        s for s in cls.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
    ]
    names = tuple(s.target.id for s in fields if isinstance(s.target, ast.Name))
    required = frozenset(
        s.target.id for s in fields if isinstance(s.target, ast.Name) and s.value is None
    )
    return Signature(names, required)


def _call_problem(call: ast.Call, name: str, sig: Signature) -> str | None:
    if any(isinstance(a, ast.Starred) for a in call.args) or any(
        k.arg is None for k in call.keywords
    ):
        return None  # *args / **kwargs: not decidable
    given = len(call.args)
    if given > len(sig.params) and not sig.var_positional:
        return f"TypeError: {name}() takes {len(sig.params)} arguments, vLLM passes {given}"
    keywords = [k.arg for k in call.keywords if k.arg is not None]
    unknown = [k for k in keywords if k not in sig.params]
    if unknown and not sig.var_keyword:
        return f"TypeError: {name}() got an unexpected keyword argument '{unknown[0]}'"
    supplied = set(sig.params[:given]) | set(keywords)
    missing = sorted(sig.required - supplied, key=sig.params.index)
    if missing:
        return f"TypeError: {name}() missing required argument '{missing[0]}'"
    return None


def mp_problem(vllm: Package, lmcache: Package) -> Problem | None:
    connector = "LMCacheMPConnector"
    module = MP_MODULE[: -len(".py")].replace("/", ".")
    tree = vllm.tree(module)
    if tree is None:
        return None
    problem = _import_problem(connector, MP_MODULE, tree, "lmcache", lmcache)
    if problem is not None:
        return problem
    own_tree = lmcache.tree(LMCACHE_MP_CONNECTOR)
    if _prefers_lmcache_class(tree) and own_tree is not None:
        external = _vllm_imports_problem(connector, vllm, lmcache, LMCACHE_MP_CONNECTOR)
        own = _import_problem(
            connector, lmcache.paths[LMCACHE_MP_CONNECTOR], own_tree, "lmcache", lmcache
        )
        if external is None and own is None:
            return None  # LMCache's own connector class is used
    group = _adapter_group(tree)
    if group is None or _missing(group, lmcache) is not None:
        return None  # vLLM's own copies of the adapter classes are used
    adapter = lmcache.tree(group.module or "")
    walked = ast.walk(adapter) if adapter is not None else iter(())
    classes = {node.name: node for node in walked if isinstance(node, ast.ClassDef)}
    imported = {a.asname or a.name: a.name for a in group.names}
    for call in ast.walk(tree):
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)):
            continue
        name = imported.get(call.func.id)
        cls = classes.get(name) if name is not None else None
        sig = _signature(cls) if cls is not None else None
        reason = _call_problem(call, name or "", sig) if sig is not None else None
        if reason is not None:
            return Problem(
                connector,
                f"{reason} (LMCache {lmcache.version}'s `{group.module}.{name}`)",
                f"{MP_MODULE}:{call.lineno}",
            )
    return None


def v1_problem(vllm: Package, lmcache: Package) -> Problem | None:
    module = V1_MODULE[: -len(".py")].replace("/", ".")
    tree = vllm.tree(module)
    if tree is None or not any(
        isinstance(node, ast.ImportFrom) and node.module == LMCACHE_V1_ADAPTER
        for node in ast.walk(tree)
    ):
        return None
    if LMCACHE_V1_ADAPTER not in lmcache.paths:
        return Problem(
            "LMCacheConnectorV1",
            f"ModuleNotFoundError: LMCache {lmcache.version} has no `{LMCACHE_V1_ADAPTER}`",
            V1_MODULE,
        )
    return _vllm_imports_problem("LMCacheConnectorV1", vllm, lmcache, LMCACHE_V1_ADAPTER)


def _tabled(folder: Path) -> list[str]:
    return sorted((p.stem for p in folder.glob("[0-9]*.json")), key=Version)


def build(
    vllm_versions: list[str], lmcache_versions: list[str], vllm_cache: Path, lmcache_cache: Path
) -> dict[str, Any]:
    pip = wheels.default_pip()
    lmcaches = []
    for version in lmcache_versions:
        _log(f"lmcache {version}")
        wheel = wheels.download(pip, lmcache_cache, version, distribution="lmcache")
        lmcaches.append(Package("lmcache", version, wheel))
    rows: list[dict[str, str]] = []
    vllm_wheels: dict[str, dict[str, str]] = {}
    for version in vllm_versions:
        _log(f"vllm {version}")
        wheel = wheels.download(pip, vllm_cache, version)
        vllm = Package("vllm", version, wheel)
        vllm_wheels[version] = {"filename": wheel.name, "sha256": sha256_of(wheel)}
        for lmcache in lmcaches:
            for problem in (mp_problem(vllm, lmcache), v1_problem(vllm, lmcache)):
                if problem is not None:
                    rows.append(problem.as_row(version, lmcache.version))
    return {
        "generator_version": GENERATOR_VERSION,
        "vllm_wheels": vllm_wheels,
        "lmcache_wheels": {
            p.version: {"filename": p.wheel.name, "sha256": sha256_of(p.wheel)} for p in lmcaches
        },
        "pairs": rows,
    }


def _only(table: dict[str, Any], vllm_versions: list[str]) -> dict[str, Any]:
    """``table`` restricted to ``vllm_versions`` (every LMCache release kept)."""
    return {
        **table,
        "vllm_wheels": {v: w for v, w in table["vllm_wheels"].items() if v in vllm_versions},
        "pairs": [row for row in table["pairs"] if row["vllm"] in vllm_versions],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the committed table")
    parser.add_argument(
        "--versions", nargs="+", help="with --check: only these vLLM releases (default: all)"
    )
    parser.add_argument("--vllm-cache-dir", type=Path, default=_REPO / ".cache" / "wheels")
    parser.add_argument("--lmcache-cache-dir", type=Path, default=_REPO / ".cache" / "lmcache")
    parser.add_argument("--out", type=Path, default=_REPO / "rules" / "lmcache" / "vllm_pairs.json")
    args = parser.parse_args(argv)
    vllm_versions = _tabled(_REPO / "rules" / "releases")
    if args.versions:
        if not args.check:
            parser.error("--versions only narrows --check; the table covers every release")
        vllm_versions = [v for v in vllm_versions if v in set(args.versions)]
    lmcache_versions = _tabled(_REPO / "rules" / "lmcache")
    try:
        table = build(vllm_versions, lmcache_versions, args.vllm_cache_dir, args.lmcache_cache_dir)
    except RuntimeError as exc:
        _log(f"error: {exc}")
        return 2
    if args.check:
        committed = json.loads(args.out.read_text(encoding="utf-8")) if args.out.exists() else {}
        if args.versions:
            committed = _only(committed, vllm_versions) if committed else {}
        if committed != table:
            _log(f"drift: {args.out.name} differs from the one derived from the wheels")
            return 1
        return 0
    args.out.write_text(json.dumps(table, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    _log(f"wrote {args.out} ({len(table['pairs'])} failing pairs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
