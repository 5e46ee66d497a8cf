"""Tiny hostile inputs cannot make kvtool use unbounded memory or time.

Each case runs the CLI in a subprocess under a small address-space cap and a
wall-clock timeout, and expects one line on stderr and exit 2.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO_ROOT

KVTOOL_MAIN = "from kvtool.cli import main; main()"
MEMORY_CAP = 1 << 30  # 1 GiB of address space: ample for kvtool, far below what bombs ask
TIMEOUT_S = 30


def _capped() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))


def _kvtool(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", KVTOOL_MAIN, *args],
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT), **(env or {})},
        capture_output=True,
        text=True,
        preexec_fn=_capped,
        timeout=TIMEOUT_S,
    )


def _refused(result: subprocess.CompletedProcess[str], needle: str) -> None:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert needle in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def _chained_variables(levels: int) -> str:
    """``v1=$v0$v0...`` repeated: a few hundred bytes that expand to gigabytes."""
    lines = ["v0=xxxxxxxxxxxxxxxx"]
    lines += [f"v{n}=" + f"$v{n - 1}" * 8 for n in range(1, levels + 1)]
    return "\n".join([*lines, f"vllm serve m --port $v{levels}", ""])


def _alias_bomb(levels: int) -> str:
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{n}: &a{n} [" + ", ".join([f"*a{n - 1}"] * 9) + "]" for n in range(1, levels + 1)]
    return "\n".join([*lines, "model: m", f"served-model-name: *a{levels}", ""])


def test_chained_variables_hit_the_expansion_limit(tmp_path: Path) -> None:
    script = tmp_path / "bomb.sh"
    script.write_text(_chained_variables(12))
    assert len(script.read_bytes()) <= 400
    _refused(_kvtool("audit", str(script)), "shell_expansion_bytes")


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (_alias_bomb(9), "yaml_nodes"),
        ("model: m\nserved-model-name: &a [*a]\n", "refers to a node that contains it"),
        ("model: " + "[" * 5000 + "]" * 5000 + "\n", "nest"),
    ],
    ids=["alias-bomb", "recursive-alias", "deep"],
)
def test_yaml_bombs_are_refused(tmp_path: Path, text: str, needle: str) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(text)
    _refused(_kvtool("audit", "--input-format", "vllm-config", str(config)), needle)


def test_fifos_and_devices_are_not_read(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.sh"
    os.mkfifo(fifo)
    _refused(_kvtool("audit", str(fifo)), "not a regular file")
    _refused(_kvtool("audit", "/dev/zero"), "not a regular file")
    snapshot = tmp_path / "metrics.prom"
    snapshot.write_text('vllm:prefix_cache_hits_total{model_name="m"} 1\n')
    for option in ("--before", "--after", "--log"):
        given = {"--before": str(snapshot), "--after": str(snapshot), option: str(fifo)}
        args = [part for pair in given.items() for part in pair]
        _refused(_kvtool("verify", *args), "not a regular file")


def test_the_input_size_limit_is_named_and_adjustable(tmp_path: Path) -> None:
    script = tmp_path / "serve.sh"
    script.write_text("vllm serve m --port 8000\n" + "# padding\n" * 200)
    result = _kvtool("audit", str(script), env={"KVTOOL_LIMIT_INPUT_BYTES": "1000"})
    _refused(result, "KVTOOL_LIMIT_INPUT_BYTES")
    assert _kvtool("audit", str(script)).returncode in (0, 1)


def test_a_pod_past_the_container_limit_is_one_report_line(tmp_path: Path) -> None:
    """Every engine carries its pod mates, so a pod's work grows with its size squared."""
    containers = "".join(
        f"    - name: c{n}\n      image: vllm/vllm-openai:v0.32.0\n"
        f'      command: ["vllm", "serve", "m", "--port", "{8000 + n}"]\n'
        for n in range(8)
    )
    big = tmp_path / "pod.yaml"
    # The shape of a Pod manifest (kubernetes/website, content/en/examples/pods/simple-pod.yaml).
    header = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  containers:\n"
    big.write_text(header + containers)
    fine = tmp_path / "serve.sh"
    fine.write_text("vllm serve m --port 8000\n")
    result = _kvtool("audit", str(big), str(fine), env={"KVTOOL_LIMIT_POD_CONTAINERS": "4"})
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "KVTOOL_LIMIT_POD_CONTAINERS" in result.stdout + result.stderr
    assert _kvtool("audit", str(big)).returncode in (0, 1)


def _commented_commands(count: int) -> str:
    return "".join(
        f"# kvtool: ignore[VG002]\nvllm serve m --port {8000 + n % 1000}  # serve {n}\n"
        for n in range(count)
    )


def _pods(count: int) -> str:
    # The shape of a Pod manifest (kubernetes/website, content/en/examples/pods/simple-pod.yaml).
    return "".join(
        f"---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: p{n}\nspec:\n  containers:\n"
        f"    - name: vllm\n      image: vllm/vllm-openai:v0.32.0\n"
        f'      command: ["vllm", "serve", "m", "--port", "{8000 + n % 1000}"]\n'
        for n in range(count)
    )


def _metrics(count: int) -> str:
    return "".join(
        f'# TYPE m{n} counter\nvllm:m{n}_total{{model_name="m",engine="{n}"}} {n}.5\n'
        for n in range(count)
    )


def _compose_services(count: int) -> str:
    # The shape of a compose file serving vLLM (vllm-project/vllm docs/deployment/docker.md).
    return "services:\n" + "".join(
        f"  vllm{n}:\n    image: vllm/vllm-openai:v0.32.0\n"
        f'    command: ["--model", "m", "--port", "{8000 + n % 1000}"]\n'
        f"    environment:\n      VLLM_LOGGING_LEVEL: INFO\n"
        for n in range(count)
    )


def _helm_model_specs(count: int) -> str:
    # The shape of production-stack values (vllm-project/production-stack, helm/values.yaml).
    return "servingEngineSpec:\n  modelSpec:\n" + "".join(
        f'  - name: "m{n}"\n    repository: "vllm/vllm-openai"\n    tag: "v0.32.0"\n'
        f'    modelURL: "m"\n    vllmConfig:\n      extraArgs: ["--port", "{8000 + n % 1000}"]\n'
        for n in range(count)
    )


def _dockerfile_instructions(count: int) -> str:
    # The shape of a Dockerfile on vLLM's image (vllm-project/vllm docs/deployment/docker.md).
    body = "".join(f"ENV VAR{n}=value{n}\nRUN echo {n} \\\n    && true\n" for n in range(count))
    return f"FROM vllm/vllm-openai:v0.32.0\n{body}CMD [\"--model\", \"m\", \"--port\", \"8000\"]\n"


def _layered_config(count: int) -> str:
    # The shape of a config.json listing layer_types (huggingface.co/google/gemma-3-1b-it).
    types = ["sliding_attention", "full_attention"] * (count // 2)
    return json.dumps(
        {
            "model_type": "llama",
            "num_hidden_layers": len(types),
            "hidden_size": 4096,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "sliding_window": 4096,
            "torch_dtype": "bfloat16",
            "layer_types": types,
        }
    )


def _trace_lines(count: int) -> str:
    return "".join(
        f'{{"id": "r{n}", "arrival": {n}, "prefix": "p{n % 7}", "prefix_tokens": 64, '
        f'"suffix_tokens": 16, "output_tokens": 8}}\n'
        for n in range(count)
    )


def _read_compose(text: str) -> None:
    from kvtool.audit.inputs import read_text

    read_text(text, "compose.yaml", input_format="compose")


def _read_helm_values(text: str) -> None:
    from kvtool.audit.inputs import read_text

    read_text(text, "values.yaml", input_format="helm-values")


def _read_dockerfile(text: str) -> None:
    from kvtool.audit.inputs import read_text

    read_text(text, "Dockerfile", input_format="dockerfile")


def _in_file(name: str, read: Any) -> Any:
    """A reader of a file path, given the text: written to a fresh temporary folder."""

    def read_text(text: str) -> None:
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / name
            path.write_text(text)
            read(path)

    return read_text


def _read_config_json(path: Path) -> None:
    from kvtool.sizing.model_spec import load_model_spec

    load_model_spec(str(path))


def _read_trace(path: Path) -> None:
    from kvtool.simulate.trace import read_trace

    read_trace(path)


def _read_shell(text: str) -> None:
    from kvtool.audit.inputs import read_text

    read_text(text, "serve.sh", input_format="shell")


def _read_kubernetes(text: str) -> None:
    from kvtool.audit.inputs import read_text

    read_text(text, "pods.yaml", input_format="kubernetes")


def _read_metrics(text: str) -> None:
    from kvtool.verify.prometheus import parse

    parse(text, "metrics")


@pytest.mark.parametrize(
    ("make", "read", "base"),
    [
        (_commented_commands, _read_shell, 125),
        (_pods, _read_kubernetes, 25),
        (_metrics, _read_metrics, 500),
        (_compose_services, _read_compose, 25),
        (_helm_model_specs, _read_helm_values, 25),
        (_dockerfile_instructions, _read_dockerfile, 100),
        (_layered_config, _in_file("config.json", _read_config_json), 500),
        (_trace_lines, _in_file("trace.jsonl", _read_trace), 250),
    ],
    ids=[
        "shell-commented-commands",
        "kubernetes-pods",
        "prometheus-lines",
        "compose-services",
        "helm-model-specs",
        "dockerfile-instructions",
        "config-json-layers",
        "trace-lines",
    ],
)
def test_readers_grow_linearly(make: Any, read: Any, base: int) -> None:
    """Times a reader on 1x, 4x and 16x inputs in one run: 16x the input may take at
    most 16 x 3 the time (quadratic growth would be 256x).

    CPU time of this process, not wall time: on a shared machine the short 1x run can
    fit in one time slice while the 16x run is preempted. The sizes take turns, so a
    slow spell hits all of them, and each keeps its best of three.
    """
    texts = [make(base), make(4 * base), make(16 * base)]
    best = [float("inf")] * len(texts)
    for _ in range(3):
        for index, text in enumerate(texts):
            started = time.process_time()
            read(text)
            best[index] = min(best[index], time.process_time() - started)
    one, four, sixteen = best
    assert four < 4 * 3 * one, (one, four)
    assert sixteen < 16 * 3 * one, (one, sixteen)


def test_a_gzip_bomb_archive_stops_at_the_ratio(tmp_path: Path) -> None:
    """A 64 MiB member of zeros compresses to ~64 KiB: listing must stop, not unpack it."""
    import gzip
    import io
    import tarfile

    archive = tmp_path / "image.tar.gz"
    member = 64 * 1024 * 1024
    with gzip.open(archive, "wb", compresslevel=1) as packed, tarfile.open(
        fileobj=packed, mode="w"
    ) as tar:
        info = tarfile.TarInfo("blobs/sha256/" + "0" * 64)
        info.size = member

        class Zeros(io.RawIOBase):
            left = member

            def readable(self) -> bool:
                return True

            def readinto(self, buffer: Any) -> int:
                count = min(len(buffer), self.left)
                buffer[:count] = bytes(count)
                self.left -= count
                return count

        tar.addfile(info, io.BufferedReader(Zeros()))
        index = b'{"schemaVersion": 2, "manifests": []}'
        entry = tarfile.TarInfo("index.json")
        entry.size = len(index)
        tar.addfile(entry, io.BytesIO(index))
    assert archive.stat().st_size < member // 100
    result = _kvtool("inspect-image", str(archive), env={"KVTOOL_LIMIT_ARCHIVE_RATIO": "10"})
    assert result.returncode == 2 and "archive_ratio" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    "args",
    [
        ("--num-requests", "1000000000"),
        ("--gpu-blocks", "1000000000000"),
    ],
)
def test_simulate_refuses_runaway_work(kvtool_cli: Any, args: tuple[str, str]) -> None:
    result = kvtool_cli("simulate", *args, "--block-bytes", "1000")
    assert result.exit_code == 2 and "simulate_work" in result.stderr


def test_simulate_refuses_a_far_future_arrival(kvtool_cli: Any, tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    trace.write_text('{"id": "a", "arrival": 100000000000, "prefix": "p", "prefix_tokens": 8}\n')
    result = kvtool_cli("simulate", "--trace", str(trace), "--block-bytes", "1000")
    # Idle steps before an arrival cost nothing, so the bound is the trace format's own.
    assert result.exit_code == 2 and f"{trace}:1: arrival" in result.stderr


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("num_hidden_layers", "1000000000000"),
        ("num_hidden_layers", '"32"'),
        ("hidden_size", "1e400"),
        ("architectures", "7"),
        ("architectures", "NaN"),
        ("architectures", '{"a": 1}'),
    ],
)
def test_size_bounds_and_types_of_config_fields(
    kvtool_cli: Any, tmp_path: Path, field: str, value: str
) -> None:
    # The shape of a Llama config.json (huggingface.co/meta-llama/Llama-3.1-8B, config.json).
    fields = {
        "model_type": '"llama"',
        "num_hidden_layers": "32",
        "hidden_size": "4096",
        "num_attention_heads": "32",
        "num_key_value_heads": "8",
        "torch_dtype": '"bfloat16"',
        field: value,
    }
    config = tmp_path / "config.json"
    config.write_text("{" + ", ".join(f'"{k}": {v}' for k, v in fields.items()) + "}")
    result = kvtool_cli("size", "-m", str(config))
    assert result.exit_code == 2 and field in result.stderr, result.stderr


def test_the_integer_digit_limit_is_named_and_adjustable() -> None:
    # Python parses a huge decimal integer in quadratic time; kvtool sets the interpreter's
    # guard to its own named limit, so JSON in a flag value past it is refused in one line.
    def audit_with(digits: int) -> subprocess.CompletedProcess[str]:
        config = '{"kv_connector": "x", "kv_role": "kv_both", "n": ' + "9" * digits + "}"
        return _kvtool(
            "audit", "--vllm-version", "0.32.0", "--", "vllm", "serve", "m",
            "--kv-transfer-config", config,
            env={"KVTOOL_LIMIT_INT_DIGITS": "1000"},
        )  # fmt: skip

    _refused(audit_with(1001), "KVTOOL_LIMIT_INT_DIGITS")
    within = audit_with(999)
    assert within.returncode != 2 and "int_digits" not in within.stderr, within.stderr


@pytest.mark.parametrize("option", ["--host-ram-gib", "--cpu-tier-gib", "--gpu-kv-gib"])
@pytest.mark.parametrize("value", ["inf", "nan", "1e308"])
def test_size_refuses_non_finite_and_huge_memory(
    kvtool_cli: Any, tmp_path: Path, option: str, value: str
) -> None:
    # An infinite or 1e308 GiB budget overflowed the tier arithmetic (a traceback).
    result = kvtool_cli(
        "size", "-m", "meta-llama/Llama-3.1-8B", "--context-len", "1000", "--sessions", "2",
        option, value,
    )  # fmt: skip
    assert result.exit_code == 2 and option in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_huge_integers_name_the_limit_and_the_input(
    kvtool_cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 5,000-digit integer in config.json, a trace, kvtool.toml or a registry answer
    is refused by the named int_digits limit, naming the input (no interpreter advice)."""
    from kvtool.image.errors import RefusedError
    from kvtool.image.manifest import load_json_object

    digits = "9" * 5000
    config = tmp_path / "config.json"
    config.write_text('{"model_type": "llama", "hidden_size": ' + digits + "}")
    trace = tmp_path / "trace.jsonl"
    trace.write_text('{"id": "a", "prefix": "p", "prefix_tokens": ' + digits + "}\n")
    settings = tmp_path / "kvtool.toml"
    settings.write_text(f"host-ram-gib = {digits}\n")
    results = {
        str(config): kvtool_cli("size", "-m", str(config)),
        f"{trace}:1": kvtool_cli("simulate", "--trace", str(trace), "--block-bytes", "1000"),
    }
    monkeypatch.chdir(tmp_path)
    results[str(settings)] = kvtool_cli("audit", "--show-settings")
    for where, result in results.items():
        assert result.exit_code == 2, result.stderr
        assert f"{where}: over the int_digits limit" in result.stderr, result.stderr
        assert "set_int_max_str_digits" not in result.stderr
    with pytest.raises(RefusedError, match="int_digits"):
        load_json_object(('{"schemaVersion": ' + digits + "}").encode(), "manifest")


@pytest.mark.parametrize("option", ["--vllm-version", "--to"])
def test_a_huge_version_number_is_not_a_version(kvtool_cli: Any, option: str) -> None:
    command = "audit" if option == "--vllm-version" else "upgrade"
    result = kvtool_cli(command, option, "9" * 5000, "--", "vllm", "serve", "m")
    assert result.exit_code == 2 and "is not a vLLM" in result.stderr, result.stderr


@pytest.mark.parametrize("value", ["nan", "inf", "1e308"])
def test_audit_host_ram_must_be_a_finite_size(
    kvtool_cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    # nan passed click's range (every comparison with nan is false) and inf its minimum,
    # so the host-memory rules compared a budget that was no number at all.
    serve = ("--", "vllm", "serve", "m", "--kv-offloading-size", "8")
    result = kvtool_cli("audit", "--host-ram-gib", value, *serve)
    assert result.exit_code == 2 and "--host-ram-gib" in result.stderr, result.stderr
    settings = tmp_path / "kvtool.toml"
    settings.write_text(f"host-ram-gib = {value}\n")
    monkeypatch.chdir(tmp_path)
    result = kvtool_cli("audit", *serve)
    assert result.exit_code == 2 and "host-ram-gib" in result.stderr, result.stderr


@pytest.mark.parametrize("value", ["nan", "inf", "1e308"])
def test_probe_timeout_must_be_finite(kvtool_cli: Any, value: str) -> None:
    # inf and 1e308 overflowed the probe's integer timeout (a traceback); nan passed click.
    result = kvtool_cli(
        "inspect-image", "--check", "runtime", "--python", sys.executable,
        "--probe-timeout", value,
    )  # fmt: skip
    assert result.exit_code == 2 and "--probe-timeout" in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("value", ["0", "-1", "true"])
def test_an_unusable_max_position_embeddings_is_ignored(
    kvtool_cli: Any, tmp_path: Path, value: str
) -> None:
    # 0 became the context length and divided the tier's tokens by zero (a traceback).
    config = tmp_path / "config.json"
    config.write_text(
        '{"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096, '
        '"num_attention_heads": 32, "num_key_value_heads": 8, "torch_dtype": "bfloat16", '
        f'"max_position_embeddings": {value}}}'
    )
    result = kvtool_cli(
        "launch", "native-cpu-offload", "--model", "m", "--host-ram-gib", "64",
        "--sizing-model", str(config),
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr


@pytest.mark.parametrize(
    "flags",
    [
        ("--kv-offloading-size", "inf"),
        ("--kv-offloading-size", "nan"),
        (
            "--kv-transfer-config",
            '{"kv_connector": "OffloadingConnector", "kv_role": "kv_both", '
            '"kv_connector_extra_config": {"cpu_bytes_to_use": 1e999}}',
        ),
        (
            "--kv-transfer-config",
            '{"kv_connector": "OffloadingConnector", "kv_role": "kv_both", '
            '"kv_connector_extra_config": {"cpu_bytes_to_use": Infinity}}',
        ),
    ],
    ids=["size-inf", "size-nan", "json-1e999", "json-infinity"],
)
def test_non_finite_sizes_reach_no_rule(
    kvtool_cli: Any, tmp_path: Path, flags: tuple[str, str]
) -> None:
    """An infinite tier size overflowed a host-memory rule (a traceback). upgrade audits
    every release from the oldest table to the newest in one run, so each rule of each
    release sees the value."""
    from kvtool.releases.loader import available_versions

    oldest, newest = available_versions()[0], available_versions()[-1]
    script = tmp_path / "serve.sh"
    script.write_text(f"vllm serve m {flags[0]} '{flags[1]}'\n")
    result = kvtool_cli("upgrade", str(script), "--from", oldest, "--to", newest)
    assert result.exit_code in (0, 1), result.stderr
    if flags[0] == "--kv-transfer-config":
        audit = kvtool_cli("audit", "--vllm-version", newest, str(script))
        assert "NaN or an infinite number" in audit.stdout, audit.stdout


@pytest.mark.parametrize("target", ["file-size-limit", "/dev/full"])
def test_a_report_that_cannot_be_written_is_one_line_naming_stdout(
    tmp_path: Path, target: str
) -> None:
    # The error of a failed write to stdout carries no file name: it read "<file>: ...".
    path = Path(target) if target.startswith("/") else tmp_path / "report.txt"

    def capped() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (100, 100))

    with path.open("wb") as stdout:
        done = subprocess.run(
            [sys.executable, "-c", KVTOOL_MAIN, "rule", "--all"],
            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
            stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=TIMEOUT_S,
            preexec_fn=capped,
        )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "cannot write the report to standard output" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
