"""Every command against each class of hostile input: a report (exit 0 or 1) or one
line on stderr and exit 2, never a traceback, and nothing from input left unescaped.

The classes are the issue's: symlink loops, directories given as files, empty files,
bytes that are not UTF-8, over-long paths, integers past the digit limit, nan and inf
where numbers are read, malformed URLs. Each case runs in-process, so it is fast, and
an exception that is not an input failure fails it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

DIGITS = "9" * 5000  # past the interpreter's (and kvtool's) 4,300-digit guard


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Paths of hostile files, by class."""
    root = tmp_path_factory.mktemp("hostile")
    loop = root / "loop"
    loop.symlink_to(loop.name)
    folder = root / "folder"
    folder.mkdir()
    empty = root / "empty"
    empty.write_bytes(b"")
    binary = root / "binary"
    binary.write_bytes(b"\xff\xfe\x00\x9b2J\n")
    long_path = "/".join(["d" * 250] * 20)  # past PATH_MAX
    return {
        "loop": str(loop),
        "folder": str(folder),
        "empty": str(empty),
        "binary": str(binary),
        "long": long_path,
        "long-name": str(root / ("n" * 300)),  # past NAME_MAX
    }


_FILE_CLASSES = ["loop", "folder", "empty", "binary", "long", "long-name"]

_FILE_COMMANDS = {
    "audit": lambda p: ["audit", "--vllm-version", "0.32.0", p],
    "audit-model-config": lambda p: ["audit", "--model-config", p, "--", "vllm", "serve", "m"],
    "audit-image-verdicts": lambda p: [
        "audit", "--image-verdicts", p, "--", "vllm", "serve", "m",
    ],
    "size": lambda p: ["size", "-m", p],
    "simulate-trace": lambda p: ["simulate", "--trace", p, "--block-bytes", "1000"],
    "simulate-model": lambda p: ["simulate", "--model", p],
    "verify-before": lambda p: ["verify", "--before", p, "--after", p],
    "verify-log": lambda p: ["verify", "--before", p, "--after", p, "--log", p],
    "inspect-image": lambda p: ["inspect-image", p],
    "upgrade": lambda p: ["upgrade", "--to", "0.32.0", p],
    "upgrade-fix": lambda p: ["upgrade", "--to", "0.32.0", "--fix", p],
    "launch-sizing-model": lambda p: [
        "launch", "native-cpu-offload", "--model", "m", "--host-ram-gib", "64",
        "--sizing-model", p,
    ],
    "rule-output": lambda p: ["rule", "--all", "-o", p],
}


def _no_traceback(result: Any) -> None:
    assert result.exit_code in (0, 1, 2), result
    shown = result.stdout + result.stderr
    assert "\x1b" not in shown and "\x9b" not in shown and "\udc9b" not in shown
    if result.exit_code == 2:
        errors = [line for line in result.stderr.splitlines() if line.startswith("kvtool: error")]
        assert len(errors) == 1, result.stderr


@pytest.mark.parametrize("kind", _FILE_CLASSES)
@pytest.mark.parametrize("command", sorted(_FILE_COMMANDS))
def test_hostile_files(
    kvtool_cli: Any, hostile: dict[str, str], command: str, kind: str
) -> None:
    _no_traceback(kvtool_cli(*_FILE_COMMANDS[command](hostile[kind])))


_NUMBERS = ["nan", "inf", "-inf", "1e308", DIGITS]

_NUMBER_COMMANDS = {
    "audit-host-ram": lambda v: ["audit", "--host-ram-gib", v, "--", "vllm", "serve", "m"],
    "audit-flag-value": lambda v: [
        "audit", "--", "vllm", "serve", "m", "--kv-offloading-size", v, "--max-model-len", v,
    ],
    "size-host-ram": lambda v: ["size", "-m", "meta-llama/Llama-3.1-8B", "--host-ram-gib", v],
    "size-context": lambda v: ["size", "-m", "meta-llama/Llama-3.1-8B", "--context-len", v],
    "size-pcie": lambda v: ["size", "-m", "meta-llama/Llama-3.1-8B", "--pcie-gbps", v],
    "launch-utilization": lambda v: [
        "launch", "native-cpu-offload", "--model", "m", "--host-ram-gib", "64",
        "--utilization", v,
    ],
    "verify-interval": lambda v: [
        "verify", "--metrics-url", "http://127.0.0.1:9/", "--interval", v,
    ],
    "simulate-blocks": lambda v: ["simulate", "--gpu-blocks", v, "--block-bytes", "1000"],
    "simulate-set": lambda v: ["simulate", "--block-bytes", "1000", "--set", f"host_blocks={v}"],
    "inspect-probe-timeout": lambda v: [
        "inspect-image", "--check", "runtime", "--python", "/nonexistent", "--probe-timeout", v,
    ],
    "upgrade-to": lambda v: ["upgrade", "--to", v, "--", "vllm", "serve", "m"],
    "flag": lambda v: ["flag", v],
}


@pytest.mark.parametrize("value", _NUMBERS, ids=["nan", "inf", "-inf", "1e308", "digits"])
@pytest.mark.parametrize("command", sorted(_NUMBER_COMMANDS))
def test_hostile_numbers(kvtool_cli: Any, command: str, value: str) -> None:
    _no_traceback(kvtool_cli(*_NUMBER_COMMANDS[command](value)))


@pytest.mark.parametrize(
    "url",
    [
        "http://[::1",
        "http://999.999.999.999:1/",
        "http://\x01/",
        "http://127.0.0.1:99999/",
        "ftp://127.0.0.1/",
        "http://" + "a" * 300 + "/",
        "",
    ],
)
@pytest.mark.parametrize("command", ["audit", "verify"])
def test_malformed_urls(kvtool_cli: Any, command: str, url: str) -> None:
    args = ["audit", "--url", url] if command == "audit" else [
        "verify", "--metrics-url", url, "--interval", "0.01",
    ]  # fmt: skip
    _no_traceback(kvtool_cli(*args))


def test_a_symlink_loop_as_output_file(kvtool_cli: Any, hostile: dict[str, str]) -> None:
    for args in (["rule", "--all"], ["flag", "--kv-offloading-size"]):
        result = kvtool_cli(*args, "-o", hostile["loop"])
        assert result.exit_code == 2 and "Traceback" not in result.stderr
    assert os.path.islink(hostile["loop"])  # the link itself is left as it was


def test_a_long_path_as_launch_output_dir(kvtool_cli: Any, hostile: dict[str, str]) -> None:
    result = kvtool_cli(
        "launch", "native-cpu-offload", "--model", "m", "--host-ram-gib", "64",
        "-d", hostile["long"],
    )  # fmt: skip
    _no_traceback(result)
    assert result.exit_code == 2
    assert not Path(hostile["long"].split("/")[0]).exists()
