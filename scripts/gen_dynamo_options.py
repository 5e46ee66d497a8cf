#!/usr/bin/env python3
"""Generate ``rules/dynamo/worker_options.json`` from released NVIDIA Dynamo wheels.

    python scripts/gen_dynamo_options.py                      # every final release >= 1.0.0
    python scripts/gen_dynamo_options.py --versions 1.2.1 1.6.1
    python scripts/gen_dynamo_options.py --check              # exit 1 when the table drifts

Dynamo's vLLM worker (``python3 -m dynamo.vllm``) parses its own options first
(``parse_known_args`` in ``dynamo/vllm/args.py``) and gives the other words to vLLM's
engine parser (``AsyncEngineArgs.add_cli_args``). The table lists Dynamo's own options,
so kvtool can drop them before auditing the rest as vLLM's: every option added in
``dynamo/vllm/args.py``, ``dynamo/vllm/backend_args.py`` and
``dynamo/common/configuration/groups/runtime_args.py`` (Dynamo's ``add_argument`` and
``add_negatable_bool_argument`` helpers, with their ``obsolete_flag`` aliases, and plain
``parser.add_argument("--x", ...)`` calls), read with ``ast`` from the wheel (``ai-dynamo``
on PyPI, fetched with ``pip download --no-deps`` into ``.cache/dynamo/``); Dynamo is never
imported. Per option: how many values it takes (``arity``) and the first and last release
read that has it. The union over releases is kept: a deployment's Dynamo release is not
always known (its image tag may be a mirror's).
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
import zipfile
from pathlib import Path
from typing import Any

from packaging.version import Version

sys.path.insert(0, str(Path(__file__).resolve().parent))
from releasegen import wheels
from releasegen.build import sha256_of

_REPO = Path(__file__).resolve().parent.parent
DISTRIBUTION = "ai-dynamo"
# 1.0.0 is the first release whose vLLM worker the deployment examples kvtool reads use.
OLDEST = Version("1.0.0")
GENERATOR_VERSION = 1
MODULES = (
    "dynamo/vllm/args.py",
    "dynamo/vllm/backend_args.py",
    "dynamo/common/configuration/groups/runtime_args.py",
)
_HELPERS = {"add_argument", "add_negatable_bool_argument"}
_SWITCH_ACTIONS = {"store_true", "store_false", "store_const", "count", "version", "help"}


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def released_versions() -> list[str]:
    found = [
        version
        for version in wheels.published_versions(wheels.default_pip(), DISTRIBUTION)
        if version >= OLDEST and not version.is_prerelease
    ]
    return [str(v) for v in sorted(found)]


def _literal(node: ast.expr | None) -> Any:
    if node is None:
        return None
    try:
        return ast.literal_eval(node)
    except ValueError:
        return _attribute_name(node)


def _attribute_name(node: ast.expr) -> str | None:
    """``argparse.BooleanOptionalAction`` -> ``BooleanOptionalAction``."""
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return None


def _arity(call: ast.Call, helper: str | None) -> str:
    keywords = {k.arg: _literal(k.value) for k in call.keywords if k.arg is not None}
    action = keywords.get("action")
    if helper == "add_negatable_bool_argument" or action == "BooleanOptionalAction":
        return "negatable"
    if action in _SWITCH_ACTIONS:
        return "none"
    nargs = keywords.get("nargs")
    if nargs in ("*", "+"):
        return "many"
    if nargs == "?":
        return "optional"
    return "one"


def options_in(tree: ast.Module) -> dict[str, str]:
    """Every option name an ``add_argument``-like call in ``tree`` adds -> its arity."""
    found: dict[str, str] = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = _attribute_name(node.func)
        if name not in _HELPERS:
            continue
        keywords = {k.arg: k.value for k in node.keywords if k.arg is not None}
        if isinstance(node.func, ast.Name) and "flag_name" in keywords:  # Dynamo's helpers
            names = [_literal(keywords["flag_name"]), _literal(keywords.get("obsolete_flag"))]
            helper: str | None = name
        else:  # parser.add_argument("--x", "--y", ...)
            names = [_literal(arg) for arg in node.args]
            helper = None
        for option in names:
            if isinstance(option, str) and option.startswith("--"):
                found[option] = _arity(node, helper)
    return found


def options_of_wheel(wheel_path: Path) -> dict[str, str]:
    found: dict[str, str] = {}
    with zipfile.ZipFile(wheel_path) as wheel:
        present = set(wheel.namelist())
        for module in MODULES:
            if module in present:
                found.update(options_in(ast.parse(wheel.read(module).decode("utf-8"))))
    return found


def build_table(wheels_by_version: dict[str, Path]) -> dict[str, Any]:
    options: dict[str, dict[str, str]] = {}
    for version in sorted(wheels_by_version, key=Version):
        for option, arity in sorted(options_of_wheel(wheels_by_version[version]).items()):
            row = options.setdefault(option, {"arity": arity, "first": version})
            row["arity"] = arity  # the newest release read decides
            row["last"] = version
    return {
        "generator": "scripts/gen_dynamo_options.py",
        "generator_version": GENERATOR_VERSION,
        "distribution": DISTRIBUTION,
        "modules": list(MODULES),
        "wheels": [
            {"version": v, "file": p.name, "sha256": sha256_of(p)}
            for v, p in sorted(wheels_by_version.items(), key=lambda item: Version(item[0]))
        ],
        "options": dict(sorted(options.items())),
    }


def dump(table: dict[str, Any]) -> str:
    return json.dumps(table, indent=1, sort_keys=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--versions", nargs="+", help="releases to read (default: all >= 1.0.0)")
    parser.add_argument("--check", action="store_true", help="exit 1 when the table drifts")
    parser.add_argument("--cache-dir", type=Path, default=_REPO / ".cache" / "dynamo")
    parser.add_argument(
        "--out", type=Path, default=_REPO / "rules" / "dynamo" / "worker_options.json"
    )
    args = parser.parse_args(argv)
    if args.versions:
        versions = list(args.versions)
    elif args.check and args.out.exists():
        versions = [w["version"] for w in json.loads(args.out.read_text())["wheels"]]
    else:
        versions = released_versions()
    found: dict[str, Path] = {}
    for version in versions:
        _log(f"{DISTRIBUTION} {version}")
        try:
            found[version] = wheels.download(
                wheels.default_pip(), args.cache_dir, version, distribution=DISTRIBUTION
            )
        except RuntimeError as exc:
            _log(f"error: {DISTRIBUTION} {version}: {exc}")
            return 2
    text = dump(build_table(found))
    if args.check:
        if not args.out.exists() or args.out.read_text() != text:
            _log(f"drift: {args.out} differs from the table derived from the wheels")
            return 1
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    _log(f"wrote {args.out} ({len(found)} releases)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
