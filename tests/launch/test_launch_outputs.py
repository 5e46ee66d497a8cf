"""kvtool launch: every recipe renders valid shell, compose and Kubernetes output.

Kubernetes manifests are validated strictly (unknown fields rejected) against the
Kubernetes 1.29 schemas shipped by the ``kubernetes-validate`` package, 1.29 being the
first release with native sidecars on by default (the LMCache server's shape). Compose
files are validated against the Compose Specification schema vendored from the
docker-compose 1.29.2 wheel (tests/launch/data/README.md).
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

from kvtool.launch.plan import LaunchOptions
from kvtool.launch.recipe import Recipe, load_recipes
from kvtool.launch.service import launch, supported_versions

KUBERNETES_VERSION = "1.29.0"
COMPOSE_SCHEMA = Path(__file__).parent / "data" / "compose_spec.json"
RECIPES = load_recipes()


def _compose_validator() -> jsonschema.Draft201909Validator:
    # The schema declares draft 2019-09 ("$schema"), so validate with that draft.
    return jsonschema.Draft201909Validator(json.loads(COMPOSE_SCHEMA.read_text()))


def _newest_supported(recipe: Recipe) -> str:
    versions = supported_versions(recipe)
    assert versions, f"{recipe.name} supports no release table"
    return versions[-1]


def _render(recipe: Recipe, target: str, tp: int = 2, **extra: object) -> str:
    options = LaunchOptions(model="meta-llama/Llama-3.1-8B-Instruct", tp=tp, target=target)  # type: ignore[arg-type]
    result = launch(
        recipe.name,
        options,
        vllm_version=_newest_supported(recipe),
        host_ram_gib=200,
        **extra,  # type: ignore[arg-type]
    )
    (text,) = result.files.values()
    return text


@pytest.mark.parametrize(
    "recipe", [r for r in RECIPES if "k8s" in r.target_names], ids=lambda r: r.name
)
def test_kubernetes_manifests_validate_against_the_schema(recipe: Recipe) -> None:
    documents = [d for d in yaml.safe_load_all(_render(recipe, "k8s")) if d]
    assert documents
    core = [d for d in documents if d["apiVersion"] in ("v1", "apps/v1")]
    assert core, "every recipe emits at least one core Kubernetes object"
    for document in core:
        kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize(
    "recipe", [r for r in RECIPES if "compose" in r.target_names], ids=lambda r: r.name
)
def test_compose_files_validate_against_the_compose_spec(recipe: Recipe) -> None:
    document = yaml.safe_load(_render(recipe, "compose"))
    _compose_validator().validate(document)
    engines = [s for s in document["services"].values() if s["entrypoint"] == ["vllm", "serve"]]
    assert engines


@pytest.mark.parametrize(
    "recipe", [r for r in RECIPES if "shell" in r.target_names], ids=lambda r: r.name
)
def test_shell_scripts_are_valid_bash(recipe: Recipe, tmp_path: Path) -> None:
    script = tmp_path / "launch.sh"
    script.write_text(_render(recipe, "shell"))
    subprocess.run(["bash", "-n", str(script)], check=True)


def test_invalid_manifest_is_rejected_by_the_schema_check() -> None:
    # The validator must be able to fail: a Deployment with a misspelt field.
    native = next(r for r in RECIPES if r.name == "native-cpu-offload")
    deployment = next(yaml.safe_load_all(_render(native, "k8s")))
    deployment["spec"]["template"]["spec"]["containers"][0]["commandd"] = ["x"]
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSION, strict=True)


def test_invalid_compose_file_is_rejected_by_the_schema_check() -> None:
    native = next(r for r in RECIPES if r.name == "native-cpu-offload")
    document = yaml.safe_load(_render(native, "compose"))
    document["services"]["vllm"]["entrypointt"] = ["x"]
    with pytest.raises(jsonschema.ValidationError):
        _compose_validator().validate(document)


def _fake_program(bin_dir: Path, name: str, record: Path) -> None:
    # Records its argv as JSON, one line per call, and exits.
    program = bin_dir / name
    program.write_text(
        "#!/usr/bin/env python3\nimport json, sys\n"
        f"open({str(record)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n"
    )
    program.chmod(0o755)


def test_single_engine_script_passes_argv_through_bash_unchanged(tmp_path: Path) -> None:
    """Quoting round trip: the engine receives exactly the plan's argv (JSON included)."""
    recipe = next(r for r in RECIPES if r.name == "native-multi-tier-fs")
    options = LaunchOptions(model="meta-llama/Llama-3.1-8B-Instruct", tp=2, target="shell",
                            fs_path="/tmp/kv tier's dir")
    result = launch(recipe.name, options, vllm_version=_newest_supported(recipe), host_ram_gib=64)
    script = tmp_path / "launch.sh"
    script.write_text(result.files["launch.sh"])
    record = tmp_path / "argv.jsonl"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _fake_program(bin_dir, "vllm", record)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin"}
    subprocess.run(["bash", str(script)], check=True, env=env, timeout=30)
    (received,) = [json.loads(line) for line in record.read_text().splitlines()]
    (engine,) = result.plan.processes
    assert received == list(engine.argv[1:])
    config = json.loads(received[received.index("--kv-transfer-config") + 1])
    assert config["kv_connector_extra_config"]["secondary_tiers"][0]["root_dir"] == (
        "/tmp/kv tier's dir"
    )


def test_module_entrypoint_runs_the_api_server_module(tmp_path: Path) -> None:
    recipe = next(r for r in RECIPES if r.name.startswith("kvtool-connector"))
    python = tmp_path / "bin" / "python"
    python.parent.mkdir()
    record = tmp_path / "argv.jsonl"
    _fake_program(python.parent, "python", record)
    options = LaunchOptions(model="/models/tiny", tp=1, target="shell", entrypoint="module",
                            python=str(python), extra_args=("--block-size", "32"))
    result = launch(recipe.name, options, vllm_version=_newest_supported(recipe),
                    cpu_tier_gib=1, sizing_model="llama-3.1-8b")
    script = tmp_path / "launch.sh"
    script.write_text(result.files["launch.sh"])
    subprocess.run(["bash", str(script)], check=True, env={"PATH": "/usr/bin:/bin"}, timeout=30)
    (received,) = [json.loads(line) for line in record.read_text().splitlines()]
    assert received[:4] == ["-m", "vllm.entrypoints.openai.api_server", "--model", "/models/tiny"]
    assert received[-2:] == ["--block-size", "32"]
    config = json.loads(received[received.index("--kv-transfer-config") + 1])
    assert config["kv_connector_module_path"] == "kvtool.connector.vllm"
    assert config["kv_connector_extra_config"]["kvtool.host_capacity_bytes"] == 1 << 30


def test_supervised_script_waits_for_the_sidecar_and_stops_it(tmp_path: Path) -> None:
    """lmcache-mp as a script: the engine starts only after the server's health check
    answers, the engine's exit status is the script's, and the server is stopped."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        http_port = probe.getsockname()[1]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    record = tmp_path / "argv.jsonl"
    server = bin_dir / "lmcache"
    server.write_text(
        "#!/usr/bin/env python3\nimport http.server, json, sys\n"
        "import os\n"
        f"open({str(record)!r}, 'a').write(json.dumps(['lmcache', os.getpid()]) + '\\n')\n"
        "class H(http.server.BaseHTTPRequestHandler):\n"
        "    def do_GET(self):\n"
        "        self.send_response(200)\n        self.end_headers()\n"
        "    def log_message(self, *args):\n        pass\n"
        f"http.server.HTTPServer(('127.0.0.1', {http_port}), H).serve_forever()\n"
    )
    server.chmod(0o755)
    engine = bin_dir / "vllm"
    engine.write_text(
        "#!/usr/bin/env python3\nimport json, os, sys\n"
        f"open({str(record)!r}, 'a').write(json.dumps(['vllm', os.environ['PYTHONHASHSEED']])"
        " + '\\n')\nsys.exit(3)\n"
    )
    engine.chmod(0o755)
    options = LaunchOptions(model="meta-llama/Llama-3.1-8B-Instruct", tp=1, target="shell",
                            lmcache_http_port=http_port)
    recipe = next(r for r in RECIPES if r.name == "lmcache-mp")
    result = launch(recipe.name, options, vllm_version=_newest_supported(recipe),
                    host_ram_gib=16)
    script = tmp_path / "launch.sh"
    script.write_text(result.files["launch.sh"])
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin"}
    finished = subprocess.run(["bash", str(script)], env=env, timeout=60)
    assert finished.returncode == 3
    calls = [json.loads(line) for line in record.read_text().splitlines()]
    assert [c[0] for c in calls] == ["lmcache", "vllm"]  # server first, then the engine
    assert calls[1][1] == "0"  # PYTHONHASHSEED reached the engine
    deadline = time.monotonic() + 10
    while _alive(calls[0][1]) and time.monotonic() < deadline:
        time.sleep(0.1)  # the trap sent SIGTERM; give the server a moment to exit
    assert not _alive(calls[0][1]), "the script left the server running"


def _alive(pid: int) -> bool:
    """Running (a zombie awaiting its reaper counts as stopped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
