"""Habits every command shares: errors blame what the user typed and suggest the nearest
valid word, and ``KVTOOL_OUTPUT_FORMAT`` sets the format of every command at once.

Rule codes and names come from the registry, never typed in.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from kvtool.audit.registry import registry
from tests.conftest import REPO_ROOT, CliResult

Cli = Callable[..., CliResult]
EXAMPLE = str(REPO_ROOT / "examples" / "lmcache-tp4.sh")


def test_a_bad_select_on_the_command_line_is_blamed_on_it(
    kvtool_cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text('[tool.kvtool]\nselect = ["ALL"]\n', "utf-8")
    result = kvtool_cli("audit", EXAMPLE, "--select", "NOPE999")
    assert result.exit_code == 2
    assert result.stderr.startswith("kvtool: error: --select: 'NOPE999'")
    assert "pyproject.toml" not in result.stderr
    ignored = kvtool_cli("audit", EXAMPLE, "--ignore", "NOPE999")
    assert ignored.exit_code == 2 and "--ignore: 'NOPE999'" in ignored.stderr


def test_an_unknown_rule_gets_the_nearest_code_of_its_family(kvtool_cli: Cli) -> None:
    codes = sorted(rule.code for rule in registry)
    family = codes[0].rstrip("0123456789")
    last = max(c for c in codes if c.rstrip("0123456789") == family)
    typo = f"{family}{int(last[len(family) :]) + 50}"
    result = kvtool_cli("rule", typo)
    assert result.exit_code == 2 and f"Did you mean `{last}`?" in result.stderr
    rule = next(iter(registry))
    misspelt = rule.name[:-1] + ("x" if rule.name[-1] != "x" else "y")
    named = kvtool_cli("rule", misspelt)
    assert f"Did you mean `{rule.name}`?" in named.stderr


@pytest.mark.parametrize(
    "args",
    [
        ("rule", "--all"),
        ("size", "--model", "Qwen/Qwen3-8B"),
        ("launch", "--list"),
    ],
)
def test_output_format_from_the_environment(
    kvtool_cli: Cli, monkeypatch: pytest.MonkeyPatch, args: tuple[str, ...]
) -> None:
    monkeypatch.setenv("KVTOOL_OUTPUT_FORMAT", "json")
    result = kvtool_cli(*args)
    assert result.exit_code == 0, result.stderr
    assert "schema_version" in json.loads(result.stdout)
