"""Every rule's documented Example fires, its documented Fix quiets it, and its nearest
correct neighbour never fires (cases in tests/audit/data/rule_cases.toml)."""

from __future__ import annotations

import json
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kvtool.audit import rules as _rules  # noqa: F401  (registers every rule)
from kvtool.audit.registry import registry
from tests.conftest import CliResult

CASES: dict[str, dict[str, Any]] = tomllib.loads(
    (Path(__file__).parent / "data" / "rule_cases.toml").read_text()
)
Cli = Callable[..., CliResult]


def _flat(text: str) -> str:
    return " ".join(text.split())


def _reported(
    cli: Cli, tmp_path: Path, code: str, case: dict[str, Any], text: str, *, fixed: bool = False
) -> bool:
    path = tmp_path / case.get("file", "serve.sh")
    path.write_text(text + "\n")
    version = case.get("fix_version", case["version"]) if fixed else case["version"]
    result = cli(
        "audit",
        str(path),
        "--vllm-version",
        version,
        "--select",
        ",".join(case.get("select", [code])),
        "--output-format",
        "json",
        *case.get("args", ()),
    )
    assert result.exit_code in (0, 1), result.stderr
    return any(f["code"] == code for f in json.loads(result.stdout)["findings"])


@pytest.mark.parametrize("code", sorted(CASES))
def test_documented_example_fires_and_its_fix_quiets_it(
    kvtool_cli: Cli, tmp_path: Path, code: str
) -> None:
    rule = registry.get(code)
    assert rule is not None, f"{code}: no such rule"
    case = CASES[code]
    assert _flat(case["documented"]) in _flat(rule.meta.sections["Example"]), (
        f"{code}: the case does not run the documented Example"
    )
    assert _reported(kvtool_cli, tmp_path, code, case, case["fail"]), f"{code}: example quiet"
    fixed = _reported(kvtool_cli, tmp_path, code, case, case["fix"], fixed=True)
    assert not fixed, f"{code}: fix fires"
    neighbour = _reported(kvtool_cli, tmp_path, code, case, case["neighbour"], fixed=True)
    assert not neighbour, f"{code}: the nearest correct neighbour fires"


# Rules whose documented Example needs an input the case file cannot hold yet: a
# multi-document manifest, an image report, a model's config.json or an LMCache install.
# This set may only shrink: a new rule comes with its case.
NOT_YET_CASED = {
    "IM001": "an image report from inspect-image",
    "SC002": "a hybrid-attention model's config.json",
    "SZ021": "a hybrid model's config.json (block size)",
    "VG016": "an LMCache release the input pins",
}


def test_every_rule_has_its_example_cased() -> None:
    registered = {rule.code for rule in registry}
    assert set(CASES) <= registered
    assert registered - set(CASES) == set(NOT_YET_CASED)
