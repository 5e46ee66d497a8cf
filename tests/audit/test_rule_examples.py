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


def _reported(cli: Cli, tmp_path: Path, code: str, case: dict[str, Any], text: str) -> bool:
    path = tmp_path / case.get("file", "serve.sh")
    path.write_text(text + "\n")
    result = cli(
        "audit",
        str(path),
        "--vllm-version",
        case["version"],
        "--select",
        code,
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
    assert not _reported(kvtool_cli, tmp_path, code, case, case["fix"]), f"{code}: fix fires"
    assert not _reported(kvtool_cli, tmp_path, code, case, case["neighbour"]), (
        f"{code}: the nearest correct neighbour fires"
    )
