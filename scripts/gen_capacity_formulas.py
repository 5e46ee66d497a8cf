#!/usr/bin/env python3
"""Generate ``rules/models/capacity_formulas.json``: how each vLLM release turns its KV cache
blocks into the ``GPU KV cache size`` and ``Maximum concurrency`` it logs.

    python scripts/gen_capacity_formulas.py            # every tabled vLLM release
    python scripts/gen_capacity_formulas.py --check    # exit 1 when the table drifts

Each release's wheel (fetched like the release tables, ``.cache/wheels/``) is read with
``ast``; nothing is imported. ``get_max_concurrency_for_kv_cache_config`` in
``vllm/v1/core/kv_cache_utils.py`` is classified by what its body does:

- ``per_group``: every KV cache group takes ``cdiv(its spec's max_memory_usage_bytes,
  its page size)`` blocks of the shared pool, summed over the groups (the loop over
  ``kv_cache_config.kv_cache_groups`` with ``cdiv`` inside);
- ``pooled``: one figure for the whole model: the largest group's layer count times the
  bytes every group's spec needs for one layer, over one pool block of the first group's
  page (``num_layer_per_group``), rounded up once.

The token figure (``tokens``) the release logs as ``GPU KV cache size``:

- ``concurrency``: ``int(max_concurrency x max_model_len)``;
- ``blocks_per_group``: ``num_blocks // number of groups x the smallest group block``;
- ``blocks``: ``num_blocks x block_size``.

and the default of ``VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE`` (``vllm/envs.py``:
``os.getenv(NAME, default)``), which decides whether chunked local attention turns the
hybrid KV cache manager off (``chunked_local_hma_env_default``), and ``CacheConfig``'s
``DEFAULT_BLOCK_SIZE`` (``vllm/config/cache.py``; null where the class has none and the
platform chooses), the block vLLM starts from before the backend and hybrid alignment.

Each row records the wheel's file name and sha256.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from releasegen import wheels
from releasegen.build import sha256_of

_REPO = Path(__file__).resolve().parent.parent
GENERATOR_VERSION = 1
MODULE = "vllm/v1/core/kv_cache_utils.py"
ENVS_MODULE = "vllm/envs.py"
CACHE_MODULES = ("vllm/config/cache.py", "vllm/config/__init__.py")
CHUNKED_LOCAL_ENV = "VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE"
FUNCTION = "get_max_concurrency_for_kv_cache_config"


def _log(message: str) -> None:
    print(f"gen_capacity_formulas: {message}", file=sys.stderr)


def classify(source: str) -> tuple[str, int] | None:
    """(formula, line) of the concurrency function in ``source``, None when it is absent."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef) and node.name == FUNCTION:
            names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
            if "num_layer_per_group" in names:
                return "pooled", node.lineno
            # a for loop or a generator over the groups with cdiv inside
            iterations = [
                (n.iter, n) for n in ast.walk(node) if isinstance(n, ast.For)
            ] + [
                (g.iter, n) for n in ast.walk(node) if isinstance(n, ast.GeneratorExp)
                for g in n.generators
            ]
            if any(
                "kv_cache_groups" in ast.unparse(over)
                and any(isinstance(c, ast.Call) and ast.unparse(c.func) == "cdiv"
                        for c in ast.walk(body))
                for over, body in iterations
            ):
                return "per_group", node.lineno
            raise RuntimeError(f"{FUNCTION} at line {node.lineno} matches no known formula")
    return None


def classify_tokens(source: str) -> str:
    """How the module computes the logged ``GPU KV cache size`` token figure."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.BinOp)
            and isinstance(node.op, ast.Mult)
            and {ast.unparse(node.left), ast.unparse(node.right)}
            == {"max_concurrency", "max_model_len"}
        ):
            return "concurrency"
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.BinOp)
            and isinstance(node.op, ast.FloorDiv)
            and ast.unparse(node.right) == "len(kv_cache_config.kv_cache_groups)"
        ):
            return "blocks_per_group"
    return "blocks"


def env_default(source: str, name: str) -> str | None:
    """The default of ``os.getenv(name, default)`` in ``source``; None when never read."""
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Call)
            and ast.unparse(node.func) == "os.getenv"
            and len(node.args) == 2
            and isinstance(node.args[0], ast.Constant)
            and node.args[0].value == name
            and isinstance(node.args[1], ast.Constant)
        ):
            return str(node.args[1].value)
    return None


def default_block_size(sources: list[str]) -> int | None:
    """``CacheConfig.DEFAULT_BLOCK_SIZE`` in the first source that defines the class."""
    for source in sources:
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ClassDef) and node.name == "CacheConfig":
                for stmt in node.body:
                    if (
                        isinstance(stmt, ast.AnnAssign)
                        and ast.unparse(stmt.target) == "DEFAULT_BLOCK_SIZE"
                        and isinstance(stmt.value, ast.Constant)
                    ):
                        return int(stmt.value.value)
                return None
    return None


def _tabled(tables: Path) -> list[str]:
    index = json.loads((tables / "index.json").read_text(encoding="utf-8"))
    return list(index["versions"])


def build(versions: list[str], cache: Path) -> dict[str, object]:
    rows: dict[str, object] = {}
    pip = wheels.default_pip()
    for version in versions:
        wheel = wheels.download(pip, cache, version)
        with zipfile.ZipFile(wheel) as archive:
            if MODULE not in archive.namelist() and not rows:
                # Before the V1 engine's KV cache utilities (the oldest tables): no V1
                # capacity formula to read; such releases have no row.
                _log(f"{version}: no {MODULE}")
                continue
            source = archive.read(MODULE).decode("utf-8")
            envs = archive.read(ENVS_MODULE).decode("utf-8")
            names = set(archive.namelist())
            cache_sources = [
                archive.read(m).decode("utf-8") for m in CACHE_MODULES if m in names
            ]
        found = classify(source)
        if found is None and not rows:  # the V1 engine before the function existed
            _log(f"{version}: no {FUNCTION} in {MODULE}")
            continue
        if found is None:
            raise RuntimeError(f"{wheel.name}: no {FUNCTION} in {MODULE}")
        formula, line = found
        rows[version] = {
            "formula": formula,
            "tokens": classify_tokens(source),
            "chunked_local_hma_env_default": env_default(envs, CHUNKED_LOCAL_ENV),
            "default_block_size": default_block_size(cache_sources),
            "source": f"{MODULE}:{line}",
            "wheel": wheel.name,
            "sha256": sha256_of(wheel),
        }
        _log(f"{version}: {formula}, {rows[version]['tokens']}")
    return {"generator_version": GENERATOR_VERSION, "function": FUNCTION, "releases": rows}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the committed table")
    parser.add_argument("--cache-dir", type=Path, default=_REPO / ".cache" / "wheels")
    parser.add_argument(
        "--out", type=Path, default=_REPO / "rules" / "models" / "capacity_formulas.json"
    )
    args = parser.parse_args(argv)
    try:
        table = build(_tabled(_REPO / "rules" / "releases"), args.cache_dir)
    except RuntimeError as exc:
        _log(f"error: {exc}")
        return 2
    if args.check:
        committed = json.loads(args.out.read_text(encoding="utf-8")) if args.out.exists() else {}
        if committed != table:
            _log(f"drift: {args.out.name} differs from the one derived from the wheels")
            return 1
        return 0
    args.out.write_text(json.dumps(table, indent=1) + "\n", encoding="utf-8")
    _log(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
