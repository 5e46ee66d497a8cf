"""Broken and hostile inputs end with one line on stderr and exit 2, never a traceback."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

Setup = Callable[[Path], list[str]]


def _symlink_loop(tmp: Path) -> list[str]:
    (tmp / "a.sh").symlink_to(tmp / "b.sh")
    (tmp / "b.sh").symlink_to(tmp / "a.sh")
    return ["audit", str(tmp / "a.sh")]


def _long_name(tmp: Path) -> list[str]:
    return ["audit", str(tmp / ("x" * 300 + ".sh"))]


def _deep_json_flag(tmp: Path) -> list[str]:
    deep = "[" * 100_000 + "]" * 100_000
    return ["audit", "--", "vllm", "serve", "m", "--kv-transfer-config", deep]


def _huge_integer_json_flag(tmp: Path) -> list[str]:
    huge = '{"kv_connector": "x", "kv_buffer_size": ' + "9" * 5000 + "}"
    return ["audit", "--", "vllm", "serve", "m", "--kv-transfer-config", huge]


def _deep_toml(tmp: Path) -> list[str]:
    (tmp / "kvtool.toml").write_text("x = " + "[" * 100_000 + "]" * 100_000 + "\n")
    (tmp / "serve.sh").write_text("vllm serve m\n")
    os.chdir(tmp)
    return ["audit", "serve.sh"]


def _huge_integer_toml(tmp: Path) -> list[str]:
    (tmp / "kvtool.toml").write_text("x = " + "9" * 5000 + "\n")
    (tmp / "serve.sh").write_text("vllm serve m\n")
    os.chdir(tmp)
    return ["audit", "serve.sh"]


def _non_utf8_trace(tmp: Path) -> list[str]:
    (tmp / "t.jsonl").write_bytes(b'{"id": "\xff\xfe", "prefix": "p", "prefix_tokens": 1}\n')
    return ["simulate", "--trace", str(tmp / "t.jsonl"), "--block-bytes", "1000"]


def _non_utf8_script(tmp: Path) -> list[str]:
    (tmp / "s.sh").write_bytes(b"vllm serve \xff\n")
    return ["audit", str(tmp / "s.sh")]


def _report_into_missing_dir(tmp: Path) -> list[str]:
    (tmp / "s.sh").write_text("vllm serve m\n")
    return ["audit", str(tmp / "s.sh"), "-o", str(tmp / "no" / "such" / "dir" / "r.txt")]


def _report_into_read_only_dir(tmp: Path) -> list[str]:
    (tmp / "s.sh").write_text("vllm serve m\n")
    return ["audit", str(tmp / "s.sh"), "-o", "/proc/kvtool-report.txt"]


def _config_json_bad_types(tmp: Path) -> list[str]:
    (tmp / "config.json").write_text('{"model_type": "llama", "num_hidden_layers": [1]}')
    return ["size", "-m", str(tmp / "config.json")]


def _recursive_yaml_manifest(tmp: Path) -> list[str]:
    (tmp / "pod.yaml").write_text(
        "apiVersion: v1\nkind: Pod\nspec: &s\n  containers: [*s]\n"
    )
    return ["audit", "--input-format", "kubernetes", str(tmp / "pod.yaml")]


CASES: dict[str, Setup] = {
    "symlink-loop": _symlink_loop,
    "over-long-name": _long_name,
    "100k-deep-toml": _deep_toml,
    "huge-integer-toml": _huge_integer_toml,
    "non-utf8-trace": _non_utf8_trace,
    "non-utf8-script": _non_utf8_script,
    "report-missing-dir": _report_into_missing_dir,
    "report-unwritable-fs": _report_into_read_only_dir,
    "config-json-bad-type": _config_json_bad_types,
    "recursive-yaml": _recursive_yaml_manifest,
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_one_line_and_exit_2(
    kvtool_cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    monkeypatch.chdir(tmp_path)
    args = CASES[case](tmp_path)
    result = kvtool_cli(*args)
    assert result.exit_code == 2, (result.exit_code, result.stdout, result.stderr)
    errors = [line for line in result.stderr.splitlines() if line.startswith("kvtool: error:")]
    assert len(errors) == 1 and "Traceback" not in result.stderr, result.stderr


@pytest.mark.parametrize("setup", [_deep_json_flag, _huge_integer_json_flag])
def test_unreadable_json_in_a_flag_is_a_finding_or_an_error(
    kvtool_cli: Any, tmp_path: Path, setup: Setup
) -> None:
    """vLLM's parser would refuse the value: a VG000 finding (exit 1) or an error (exit 2)."""
    result = kvtool_cli(*setup(tmp_path))
    assert result.exit_code in (1, 2) and "Traceback" not in result.stderr
    assert "VG000" in result.stdout or result.stderr.startswith("kvtool: error:")
