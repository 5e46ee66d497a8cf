"""Escape sequences from input never reach the terminal raw.

A hostile script's name or flags may carry ``ESC[2J`` (clear the screen) and a fake
"All checks passed"; the report must show the bytes escaped, not obey them.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

CLEAR_AND_LIE = "\x1b[2J\x1b[HAll checks passed\r\x9b2J"


@pytest.mark.parametrize("output_format", ["text", "github"])
def test_escape_sequences_in_names_and_flags_are_made_visible(
    kvtool_cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, output_format: str
) -> None:
    monkeypatch.chdir(tmp_path)
    script = tmp_path / f"serve{CLEAR_AND_LIE}.sh"
    script.write_text(
        f"vllm serve m --calculate-kv-scales --no-such-flag{CLEAR_AND_LIE}=1 "
        f"--served-model-name '{CLEAR_AND_LIE}'\n"
    )
    result = kvtool_cli(
        "audit", script.name, "--vllm-version", "0.32.0", "--output-format", output_format
    )
    assert result.exit_code == 1, result.stderr
    shown = result.stdout + result.stderr
    assert "\x1b" not in shown and "\x9b" not in shown and "\r" not in shown
    assert "\\x1b[2J" in shown  # still visible, so the reader sees what the file holds


def test_error_lines_escape_control_characters(kvtool_cli: Any, tmp_path: Path) -> None:
    result = kvtool_cli("audit", str(tmp_path / f"missing{CLEAR_AND_LIE}.sh"))
    assert result.exit_code == 2
    assert "\x1b" not in result.stderr and result.stderr.count("\n") == 1


def test_size_and_launch_show_a_hostile_name_escaped(
    kvtool_cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A config.json's file name is the size report's title; a model name a launch note.
    monkeypatch.chdir(tmp_path)
    config = tmp_path / f"cfg{CLEAR_AND_LIE}.json"
    config.write_text(
        '{"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32,'
        ' "num_key_value_heads": 8, "num_hidden_layers": 32, "vocab_size": 1000,'
        ' "torch_dtype": "bfloat16"}'
    )
    sized = kvtool_cli("size", "--model", config.name)
    assert sized.exit_code == 0, sized.stderr
    out_dir = tmp_path / "out"
    launched = kvtool_cli(
        "launch", "native-cpu-offload", "--model", config.name, "--host-ram-gib", "64",
        "--vllm-version", "0.32.0", "-d", str(out_dir),
    )  # fmt: skip
    assert launched.exit_code == 0, launched.stderr
    for result in (sized, launched):
        shown = result.stdout + result.stderr
        assert "\x1b" not in shown and "\x9b" not in shown and "\r" not in shown
    assert "\\x1b[2J" in sized.stdout


def test_flag_and_upgrade_show_hostile_names_escaped(
    kvtool_cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kvtool.releases.loader import available_versions

    monkeypatch.chdir(tmp_path)
    script = tmp_path / f"serve{CLEAR_AND_LIE}.sh"
    script.write_text("vllm serve m --port 8000\n")
    oldest, newest = available_versions()[0], available_versions()[-1]
    results = [
        kvtool_cli("flag", f"--x{CLEAR_AND_LIE}"),
        kvtool_cli("upgrade", script.name, "--from", oldest, "--to", newest),
    ]
    for result in results:
        shown = result.stdout + result.stderr
        assert "\x1b" not in shown and "\x9b" not in shown and "\r" not in shown, shown
        assert "\\x1b[2J" in shown


def test_a_file_name_that_is_not_utf8_is_shown_escaped(
    kvtool_cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # os.listdir gives the byte 0x9b (an 8-bit CSI to many terminals) as the surrogate
    # \udc9b, which printing turns back into the raw byte.
    folder = tmp_path / "scripts"
    folder.mkdir()
    (folder / "serve").with_name(os.fsdecode(b"serve\x9b2J.sh")).write_text(
        "vllm serve m --no-such-flag\n"
    )
    monkeypatch.chdir(tmp_path)
    result = kvtool_cli("audit", "--vllm-version", "0.32.0", "scripts")
    assert result.exit_code == 1, result.stderr
    shown = result.stdout + result.stderr
    assert "\udc9b" not in shown and "serve\\x9b2J.sh" in shown, shown
