"""One rule for writes: no command replaces a file it read or was pointed at, by any name.

Each case runs a command whose ``-o`` names one of its own inputs, directly, through a
symbolic link or through a hard link, and checks the input is byte for byte as it was
and the run says why it wrote nothing. ``--fix`` keeps setuid/setgid, never writes the
file a ``--stdin-filename`` names, and a refused write is an error, never "No fixes to
apply". A retag changes the audited image only, not a longer reference containing it.
"""

from __future__ import annotations

import io
import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from kvtool.releases import available_versions
from tests.conftest import CliResult

Cli = Callable[..., CliResult]

# A config.json in the shape Hugging Face model repositories ship (e.g.
# https://huggingface.co/meta-llama/Llama-3.1-8B/blob/main/config.json), trimmed.
CONFIG = (
    '{"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32,'
    ' "num_key_value_heads": 8, "num_hidden_layers": 32, "vocab_size": 1000,'
    ' "torch_dtype": "bfloat16"}'
)
SCRIPT = "vllm serve m --calculate-kv-scales --kv-offloading-size 10\n"
# vLLM's Prometheus text (vllm/v1/metrics/loggers.py at v0.32.0 names the family).
METRICS = "# TYPE vllm:prefix_cache_queries counter\nvllm:prefix_cache_queries_total 1\n"


def _files(workdir: Path) -> dict[str, str]:
    files = {
        "run.sh": SCRIPT,
        "cfg.json": CONFIG,
        "metrics.prom": METRICS,
        "pyproject.toml": "[tool.kvtool]\n",
        "verdicts.json": "{}",
    }
    for name, text in files.items():
        (workdir / name).write_text(text)
    return files


def _previous_release() -> str:
    return available_versions()[-2]


# command words, the input the -o target stands for
CASES: dict[str, tuple[list[str], str]] = {
    "upgrade-input": (["upgrade", "run.sh", "--from", "0.30.0", "--to", "0.32.0"], "run.sh"),
    "audit-input": (["audit", "run.sh", "--vllm-version", "0.32.0"], "run.sh"),
    "audit-settings": (["audit", "run.sh", "--vllm-version", "0.32.0"], "pyproject.toml"),
    "audit-model-config": (
        ["audit", "run.sh", "--vllm-version", "0.32.0", "--model-config", "cfg.json"],
        "cfg.json",
    ),
    "verify-after": (["verify", "--before", "metrics.prom", "--after", "metrics.prom"],
                     "metrics.prom"),
    "verify-log": (
        ["verify", "--before", "metrics.prom", "--after", "metrics.prom", "--log", "run.sh"],
        "run.sh",
    ),
    "size-model": (["size", "--model", "cfg.json"], "cfg.json"),
    "launch-sizing-model": (
        ["launch", "native-cpu-offload", "--model", "cfg.json", "--host-ram-gib", "64",
         "--vllm-version", "0.32.0"],
        "cfg.json",
    ),
}  # fmt: skip


@pytest.mark.parametrize("via", ["name", "symlink", "hardlink"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_output_never_replaces_an_input(
    kvtool_cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str, via: str
) -> None:
    monkeypatch.chdir(tmp_path)
    files = _files(tmp_path)
    words, target = CASES[case]
    output = target
    if via == "symlink":
        output = "report.out"
        (tmp_path / output).symlink_to(target)
    elif via == "hardlink":
        output = "report.out"
        os.link(tmp_path / target, tmp_path / output)
    result = kvtool_cli(*words, "-o", output)
    assert result.exit_code == 2, result.stdout + result.stderr
    assert "is an input of this run" in result.stderr
    for name, text in files.items():
        assert (tmp_path / name).read_text() == text, f"{name} was changed"


def test_an_image_verdicts_file_is_not_replaced_by_the_report(
    kvtool_cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kvtool.image.model import InspectionReport, StepOutcome

    monkeypatch.chdir(tmp_path)
    (tmp_path / "run.sh").write_text(SCRIPT)
    verdicts = tmp_path / "verdicts.json"
    empty = InspectionReport(
        build_flag_step=StepOutcome(status="ran"), runtime_step=StepOutcome(status="ran"),
        verdicts=[], exit_code=0,
    )  # fmt: skip
    verdicts.write_text(empty.model_dump_json())
    before = verdicts.read_bytes()
    result = kvtool_cli(
        "audit", "run.sh", "--vllm-version", "0.32.0", "--image-verdicts", "verdicts.json",
        "-o", "verdicts.json",
    )  # fmt: skip
    assert result.exit_code == 2 and "is an input of this run" in result.stderr, result.stderr
    assert verdicts.read_bytes() == before


def test_an_archive_is_not_replaced_by_its_inspection(
    kvtool_cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.image.images import Image, docker_save

    monkeypatch.chdir(tmp_path)
    archive = tmp_path / "image.tar"
    docker_save(archive, Image(arch="amd64", kv=True), "vllm/vllm-openai:v0.32.0", "25+")
    before = archive.read_bytes()
    result = kvtool_cli("inspect-image", "image.tar", "--platform", "linux/amd64",
                        "-o", "image.tar")  # fmt: skip
    assert result.exit_code == 2 and "is an input of this run" in result.stderr, result.stderr
    assert archive.read_bytes() == before


def test_a_trace_is_not_replaced_by_the_simulation(
    kvtool_cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kvtool.simulate.trace import Request, Segment, write_trace

    monkeypatch.chdir(tmp_path)
    trace = tmp_path / "trace.jsonl"
    # One request in simulate's trace format, written by its own writer.
    with trace.open("w") as stream:
        write_trace(stream, [Request(id="r0", segments=(Segment("p", 64),), output_tokens=8)])
    before = trace.read_bytes()
    result = kvtool_cli("simulate", "--trace", "trace.jsonl", "-o", "trace.jsonl")
    assert result.exit_code == 2 and "is an input of this run" in result.stderr, result.stderr
    assert trace.read_bytes() == before


@pytest.mark.skipif(os.geteuid() != 0, reason="setting setuid on a file of another group")
def test_fix_keeps_setuid_and_setgid(kvtool_cli: Cli, tmp_path: Path) -> None:
    script = tmp_path / "serve.sh"
    script.write_text(SCRIPT)
    script.chmod(0o6755)
    result = kvtool_cli("audit", str(script), "--vllm-version", "0.32.0", "--fix")
    assert result.exit_code in (0, 1), result.stderr
    assert "--calculate-kv-scales" not in script.read_text()
    assert stat.S_IMODE(script.stat().st_mode) == 0o6755


def test_fix_never_writes_the_file_a_stdin_filename_names(
    kvtool_cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")
    victim = tmp_path / "F.sh"
    victim.write_text("# not a serve script, and never audited\n" + SCRIPT)
    before = victim.read_bytes()
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(SCRIPT.encode())))
    result = kvtool_cli(
        "audit", "-", "--stdin-filename", "../F.sh", "--vllm-version", "0.32.0", "--fix"
    )
    assert result.exit_code == 2, result.stderr
    assert "standard input" in result.stderr
    assert victim.read_bytes() == before


def _compose(tmp_path: Path, bench: str = "") -> Path:
    """A compose file on vLLM's image one release back, in the shape of vLLM's compose
    example (vllm-project/vllm, docs/deployment/docker.md); ``bench`` adds a service that
    runs another program on the image ``bench``."""
    compose = tmp_path / "compose.yaml"
    text = (
        "services:\n"
        f"  vllm:\n    image: vllm/vllm-openai:v{_previous_release()}\n"
        '    command: ["Qwen/Qwen3-0.6B", "--max-model-len", "4096"]\n'
    )
    if bench:
        text += f'  bench:\n    image: {bench}\n    entrypoint: ["python", "bench.py"]\n'
    compose.write_text(text)
    return compose


@pytest.mark.parametrize("blocker", ["read-only", "hard-link"])
def test_upgrade_fix_reports_a_refused_write(
    kvtool_cli: Cli, tmp_path: Path, blocker: str
) -> None:
    compose = _compose(tmp_path)
    before = compose.read_bytes()
    if blocker == "read-only":
        compose.chmod(0o444)
    else:
        os.link(compose, tmp_path / "other.yaml")
    result = kvtool_cli("upgrade", str(compose), "--to", available_versions()[-1], "--fix")
    assert result.exit_code == 2, result.stderr
    assert "kvtool: error:" in result.stderr and "Retagged" not in result.stderr
    assert compose.read_bytes() == before


def test_retag_leaves_a_longer_reference_alone(kvtool_cli: Cli, tmp_path: Path) -> None:
    older, newest = _previous_release(), available_versions()[-1]
    # The bench image's path contains the audited reference, tag and all.
    bench = f"registry.example.com/team/vllm/vllm-openai:v{older}-bench"
    compose = _compose(tmp_path, bench)
    result = kvtool_cli("upgrade", str(compose), "--to", newest, "--fix")
    assert result.exit_code in (0, 1), result.stderr
    text = compose.read_text()
    assert f"image: vllm/vllm-openai:v{newest}\n" in text
    assert f"image: {bench}\n" in text


def test_a_report_does_not_replace_the_file_fix_just_rewrote(
    kvtool_cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    script = tmp_path / "run.sh"
    script.write_text(SCRIPT)
    result = kvtool_cli("audit", "run.sh", "--vllm-version", "0.32.0", "--fix", "-o", "run.sh")
    assert result.exit_code == 2 and "is an input of this run" in result.stderr, result.stderr
    assert script.read_text() == SCRIPT


def test_update_baseline_renews_its_own_file_but_no_other(
    kvtool_cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    files = _files(tmp_path)
    common = ("audit", ".", "--vllm-version", "0.32.0", "--update-baseline", "--baseline")
    # The walk reads the baseline as a candidate file; renewing it is still what was asked.
    for _ in range(2):
        renewed = kvtool_cli(*common, "kvtool-baseline.json")
        assert renewed.exit_code == 0, renewed.stderr
    for other in ("pyproject.toml", "run.sh"):
        refused = kvtool_cli(*common, other)
        assert refused.exit_code == 2, refused.stderr
    for name, text in files.items():
        assert (tmp_path / name).read_text() == text, f"{name} was changed"
