#!/usr/bin/env python3
"""Generate ``rules/lmcache/<version>.json`` and ``index.json`` from released LMCache wheels.

    python scripts/gen_lmcache_tables.py                      # every final release >= 0.3.1
    python scripts/gen_lmcache_tables.py --versions 0.4.7 0.5.6
    python scripts/gen_lmcache_tables.py --check              # exit 1 when a table drifts

Wheels are fetched with ``pip download lmcache==X --no-deps`` into ``.cache/lmcache/`` and
read with ``ast`` from the zip; LMCache is never imported. Per release the table holds:

- ``config_names``: the engine config items (keys of ``_CONFIG_DEFINITIONS`` in
  ``lmcache/v1/config.py``, or the fields of ``LMCacheEngineConfig`` in releases
  before that table existed); each is settable as ``LMCACHE_<NAME>`` and, through
  vLLM's ``kv_connector_extra_config``, as ``lmcache.<name>``;
- ``aliases``: deprecated config names and what replaces them (``_CONFIG_ALIASES``);
- ``env_vars``: every ``LMCACHE_*`` name the release reads (derived from the config
  names when the env loader builds ``LMCACHE_{name.upper()}``, plus literal reads);
- ``mp_keys``: ``lmcache.mp.*`` extra-config keys (string literals, members of
  ``ExtraConfigDefault``, and ``f"lmcache.mp.<prefix>{name}"`` helpers with their calls).

Every table records the wheel's file name and sha256. Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
import zipfile
from pathlib import Path

from packaging.version import Version

sys.path.insert(0, str(Path(__file__).resolve().parent))
from releasegen import wheels
from releasegen.build import sha256_of

_REPO = Path(__file__).resolve().parent.parent
# 0.3.0 published no CPython 3.11 manylinux wheel; 0.3.1 is the first with one.
OLDEST = Version("0.3.1")
GENERATOR_VERSION = 1
_ENV_NAME = re.compile(r"^LM_?CACHE_[A-Z0-9_]+$")
_CONFIG_MODULE = "lmcache/v1/config.py"
_MP_PREFIX = "lmcache.mp."


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def released_versions() -> list[str]:
    found = [
        version
        for version in wheels.published_versions(wheels.default_pip(), "lmcache")
        if version >= OLDEST and not (version.is_prerelease or version.is_postrelease)
    ]
    return [str(v) for v in sorted(found)]


def download(cache: Path, version: str) -> Path:
    """The lmcache wheel of ``version`` in ``cache``, fetched by pip when missing."""
    return wheels.download(wheels.default_pip(), cache, version, distribution="lmcache")


def _trees(wheel: zipfile.ZipFile) -> dict[str, ast.Module]:
    trees: dict[str, ast.Module] = {}
    for name in wheel.namelist():
        if name.startswith("lmcache/") and name.endswith(".py"):
            try:
                trees[name] = ast.parse(wheel.read(name).decode("utf-8", "replace"))
            except SyntaxError:
                continue
    return trees


def _top_level_dict(tree: ast.Module, name: str) -> ast.Dict | None:
    for stmt in tree.body:
        targets = [stmt.target] if isinstance(stmt, ast.AnnAssign) else getattr(stmt, "targets", [])
        value = getattr(stmt, "value", None)
        if any(isinstance(t, ast.Name) and t.id == name for t in targets) and isinstance(
            value, ast.Dict
        ):
            return value
    return None


def _string_keys(node: ast.Dict) -> list[str]:
    return [k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)]


def _class(tree: ast.Module, name: str) -> ast.ClassDef | None:
    return next((n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == name), None)


def config_names(config: ast.Module | None) -> tuple[list[str], dict[str, str]]:
    """Engine config item names and deprecated aliases (old -> new)."""
    if config is None:
        return [], {}
    definitions = _top_level_dict(config, "_CONFIG_DEFINITIONS")
    if definitions is not None:
        names = _string_keys(definitions)
    else:  # older releases: the fields of the LMCacheEngineConfig dataclass
        cls = _class(config, "LMCacheEngineConfig")
        names = [
            s.target.id
            for s in (cls.body if cls else [])
            if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
        ]
    aliases_node = _top_level_dict(config, "_CONFIG_ALIASES")
    aliases: dict[str, str] = {}
    if aliases_node is not None:
        for key, value in zip(aliases_node.keys, aliases_node.values, strict=True):
            if isinstance(key, ast.Constant) and isinstance(value, ast.Constant):
                aliases[str(key.value)] = str(value.value)
    return sorted(set(names)), dict(sorted(aliases.items()))


def _builds_env_names(config: ast.Module | None) -> bool:
    """The env loader spells ``f"LMCACHE_{name.upper()}"`` for every config name."""
    for node in ast.walk(config) if config is not None else ():
        if isinstance(node, ast.JoinedStr) and node.values:
            head = node.values[0]
            if isinstance(head, ast.Constant) and head.value == "LMCACHE_":
                return True
    return False


def _literal_env_names(trees: dict[str, ast.Module]) -> set[str]:
    return {
        node.value
        for tree in trees.values()
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and _ENV_NAME.match(node.value)
    }


def _helper_keys(tree: ast.Module) -> set[str]:
    """Keys built by a local helper ``f"lmcache.mp.<prefix>{name}"`` and the names it is
    called with (``number("horizon_steps", ...)``)."""
    keys: set[str] = set()
    for outer in ast.walk(tree):
        if not isinstance(outer, ast.FunctionDef):
            continue
        for helper in outer.body:
            if not isinstance(helper, ast.FunctionDef) or not helper.args.args:
                continue
            param = helper.args.args[0].arg
            prefix = None
            for node in ast.walk(helper):
                if isinstance(node, ast.JoinedStr) and len(node.values) == 2:
                    head, tail = node.values
                    if (
                        isinstance(head, ast.Constant)
                        and str(head.value).startswith(_MP_PREFIX)
                        and isinstance(tail, ast.FormattedValue)
                        and isinstance(tail.value, ast.Name)
                        and tail.value.id == param
                    ):
                        prefix = str(head.value)
            if prefix is None:
                continue
            for call in ast.walk(outer):
                if (
                    isinstance(call, ast.Call)
                    and isinstance(call.func, ast.Name)
                    and call.func.id == helper.name
                    and call.args
                    and isinstance(call.args[0], ast.Constant)
                ):
                    keys.add(prefix + str(call.args[0].value))
    return keys


def mp_keys(trees: dict[str, ast.Module]) -> list[str]:
    keys: set[str] = set()
    for path, tree in trees.items():
        if not path.startswith("lmcache/integration/vllm/"):
            continue
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and re.fullmatch(r"lmcache\.mp\.[a-z0-9_.]*[a-z0-9]", node.value)
            ):
                keys.add(node.value)
        defaults = _class(tree, "ExtraConfigDefault")
        for stmt in defaults.body if defaults else []:
            if isinstance(stmt, ast.Assign) and isinstance(stmt.targets[0], ast.Name):
                keys.add(_MP_PREFIX + stmt.targets[0].id)
        keys |= _helper_keys(tree)
    return sorted(keys)


def build_table(version: str, wheel_path: Path) -> dict[str, object]:
    with zipfile.ZipFile(wheel_path) as wheel:
        trees = _trees(wheel)
    config = trees.get(_CONFIG_MODULE)
    names, aliases = config_names(config)
    env_vars = _literal_env_names(trees)
    if _builds_env_names(config):
        env_vars |= {f"LMCACHE_{n.upper()}" for n in [*names, *aliases]}
    return {
        "version": version,
        "wheel": {
            "filename": wheel_path.name,
            "sha256": sha256_of(wheel_path),
            "generator_version": GENERATOR_VERSION,
        },
        "config_names": names,
        "aliases": aliases,
        "env_vars": sorted(env_vars),
        "mp_keys": mp_keys(trees),
    }


def dump(data: object) -> str:
    return json.dumps(data, indent=1, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--versions", nargs="+", help="releases to derive (default: all)")
    parser.add_argument("--check", action="store_true", help="compare with committed tables")
    parser.add_argument("--cache-dir", type=Path, default=_REPO / ".cache" / "lmcache")
    parser.add_argument("--out", type=Path, default=_REPO / "rules" / "lmcache")
    args = parser.parse_args(argv)
    if args.versions:
        versions = sorted(set(args.versions), key=Version)
    elif args.check:
        versions = sorted((p.stem for p in args.out.glob("[0-9]*.json")), key=Version)
    else:
        versions = released_versions()
    args.out.mkdir(parents=True, exist_ok=True)
    drift: list[str] = []
    for version in versions:
        _log(f"lmcache {version}")
        try:
            wheel = download(args.cache_dir, version)
        except RuntimeError as exc:
            _log(f"error: lmcache {version}: {exc}")
            return 2
        text = dump(build_table(version, wheel))
        target = args.out / f"{version}.json"
        if args.check:
            if not target.exists() or target.read_text() != text:
                drift.append(f"{version}: table differs from the one derived from {wheel.name}")
        else:
            target.write_text(text)
    committed = sorted((p.stem for p in args.out.glob("[0-9]*.json")), key=Version)
    index = dump({"versions": committed})
    if args.check:
        if (args.out / "index.json").read_text() != index:
            drift.append("index.json does not list the committed tables")
        for line in drift:
            _log(f"drift: {line}")
        return 1 if drift else 0
    (args.out / "index.json").write_text(index)
    _log(f"wrote {len(versions)} table(s) and index.json ({len(committed)} releases)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
