"""Hostile values given to ``kvtool launch`` stay data in every generated file.

Shell output is run by bash with a stand-in ``vllm`` on PATH: the stand-in records the
argv it gets, and any payload that ran as shell would leave a marker file behind.
Compose and Kubernetes output is parsed back: with the hostile value replaced by a
benign one, the documents and their keys equal those generated for the benign value.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

BENIGN = "org/model"
RECIPE = (
    "native-cpu-offload", "--cpu-tier-gib", "1", "--vllm-version", "0.32.0",
    "--sizing-model", "llama-3.1-8b",
)


def _payloads(marker_dir: Path) -> list[str]:
    touch = f"touch {marker_dir}/PWNED"
    return [
        f"m\n{touch}\n#",
        f"m\r{touch}\r",
        f"m$({touch})",
        f"m`{touch}`",
        f"m'; {touch}; '",
        'm"; ' + touch + '; "',
        "m\nkind: Pod\nspec: {hostNetwork: true}\n---\nkind: Pod",
        "m\u2028evil: key\u0085more: keys",
        "m\x1b[2J\x1b[HAll checks passed",
    ]


def _generated(kvtool_cli: Any, model: str, target: str, *extra: str) -> str:
    result = kvtool_cli("launch", *RECIPE, "--model", model, "--target", target, *extra)
    assert result.exit_code == 0, result.stderr
    assert "\x1b" not in result.stderr
    return str(result.stdout)


def test_shell_output_runs_hostile_values_as_data(kvtool_cli: Any, tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    record = tmp_path / "argv"
    fake = bin_dir / "vllm"
    fake.write_text(f'#!/bin/sh\nprintf "%s\\0" "$@" > {record}\n')
    fake.chmod(0o755)
    for payload in _payloads(tmp_path):
        script = tmp_path / "launch.sh"
        script.write_text(
            _generated(kvtool_cli, payload, "shell", "--env", f"KVTOOL_TEST={payload}")
        )
        subprocess.run(["bash", "-n", str(script)], check=True)
        env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
        subprocess.run(["bash", str(script)], check=True, env=env, cwd=tmp_path, timeout=30)
        assert not (tmp_path / "PWNED").exists(), payload
        argv = record.read_bytes().split(b"\0")[:-1]
        assert argv[:2] == [b"serve", payload.encode()], payload


def _replaced(node: Any, old: str, new: str) -> Any:
    if isinstance(node, dict):
        return {_replaced(k, old, new): _replaced(v, old, new) for k, v in node.items()}
    if isinstance(node, list):
        return [_replaced(item, old, new) for item in node]
    return node.replace(old, new) if isinstance(node, str) else node


def _strings(node: Any) -> list[str]:
    if isinstance(node, dict):
        return [s for k, v in node.items() for s in (*_strings(k), *_strings(v))]
    if isinstance(node, list):
        return [s for item in node for s in _strings(item)]
    return [node] if isinstance(node, str) else []


@pytest.mark.parametrize("target", ["compose", "k8s"])
def test_yaml_output_parses_back_to_the_same_documents(
    kvtool_cli: Any, tmp_path: Path, target: str
) -> None:
    expected = list(yaml.safe_load_all(_generated(kvtool_cli, BENIGN, target)))
    for payload in _payloads(tmp_path):
        text = _generated(kvtool_cli, payload, target)
        documents = list(yaml.safe_load_all(text))
        assert [_replaced(d, payload, BENIGN) for d in documents] == expected, payload
        assert any(payload in leaf for leaf in _strings(documents)), payload


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--env", "BAD-NAME=1"),
        ("--env", "1X=1"),
        ("--env", "X;touch y=1"),
        ("--env", "\u00e9T\u00c9=1"),
        ("--name", "Evil\nname"),
        ("--name", "x" * 41),
        ("--name", "a_b"),
        ("--fs-path", "/data:/etc:rw"),
        ("--fs-path", "relative/dir"),
        ("--fs-path", "/data\n- /etc:/host-etc"),
    ],
)
def test_names_that_cannot_be_quoted_are_refused(kvtool_cli: Any, flag: str, value: str) -> None:
    result = kvtool_cli("launch", *RECIPE, "--model", BENIGN, flag, value)
    assert result.exit_code == 2 and "Traceback" not in result.stderr
    assert "\n" not in result.stderr.strip()


def test_launch_output_dir_refuses_symlinks_and_keeps_modes(
    kvtool_cli: Any, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (out / "launch.sh").symlink_to(victim)
    result = kvtool_cli("launch", *RECIPE, "--model", BENIGN, "-d", str(out), "--force")
    assert result.exit_code == 2 and "symbolic link" in result.stderr
    assert victim.read_text() == "precious\n"
    (out / "launch.sh").unlink()
    assert kvtool_cli("launch", *RECIPE, "--model", BENIGN, "-d", str(out)).exit_code == 0
    assert (out / "launch.sh").stat().st_mode & 0o777 == 0o755
    (out / "launch.sh").chmod(0o700)
    again = kvtool_cli("launch", *RECIPE, "--model", BENIGN, "-d", str(out), "--force")
    assert again.exit_code == 0
    assert (out / "launch.sh").stat().st_mode & 0o777 == 0o700
    assert sorted(p.name for p in out.iterdir()) == ["launch.sh"]
