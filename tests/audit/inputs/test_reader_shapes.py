"""Helm values, Dockerfiles, SkyPilot tasks, compose, scripts: a removed flag at its line.

Each shape is written here in the form the cited public repository uses (not copied).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvtool.audit.inputs import read_input_set, read_text
from kvtool.audit.inputs.registry import FILE_FORMATS, READERS, describe, detect_kind
from tests.audit.inputs.removed_flag import GONE_AT, REMOVED, line_of, removed_in_text

F = REMOVED

SHAPES: dict[str, tuple[str, str]] = {
    # vllm-project/production-stack helm/values-*.yaml: servingEngineSpec.modelSpec[].
    "production-stack-extra-args": (
        "values.yaml",
        f"""\
servingEngineSpec:
  runtimeClassName: ""
  modelSpec:
  - name: "llama3"
    repository: "vllm/vllm-openai"
    tag: "v0.20.0"
    modelURL: "meta-llama/Llama-3.1-8B-Instruct"
    replicaCount: 1
    requestGPU: 1
    vllmConfig:
      maxModelLen: 4096
      extraArgs: ["--trust-remote-code", "{F}"]
    lmcacheConfig:
      enabled: true
      cpuOffloadingBufferSize: "20"
""",
    ),
    # vllm-project/vllm examples/online_serving/chart-helm/values.yaml: image.command.
    "vllm-chart-image-command": (
        "values.yaml",
        f"""\
image:
  repository: "vllm/vllm-openai"
  tag: "v0.20.0"
  command: ["vllm", "serve", "/data/", "--served-model-name", "opt-125m", "{F}"]
containerPort: 8000
""",
    ),
    # vllm-project/vllm docs/deployment/docker.md: a Dockerfile FROM vllm's image with CMD.
    "dockerfile-cmd-on-vllm-base": (
        "Dockerfile",
        f"""\
FROM vllm/vllm-openai:v0.20.0
RUN pip install --no-cache-dir lmcache
CMD ["meta-llama/Llama-3.1-8B-Instruct", \\
     "{F}"]
""",
    ),
    # Multi-stage build whose final stage starts the server in shell form.
    "dockerfile-shell-entrypoint": (
        "Containerfile",
        f"""\
FROM python:3.12 AS build
RUN pip wheel vllm
FROM nvidia/cuda:12.8.0-runtime-ubuntu22.04
ENTRYPOINT vllm serve m --port 8000 \\
    {F}
""",
    ),
    # skypilot-org/skypilot llm/vllm/serve.yaml: a run: block with envs.
    "skypilot-run": (
        "serve.yaml",
        f"""\
envs:
  MODEL_NAME: meta-llama/Llama-3.1-8B-Instruct
resources:
  accelerators: {{L4: 1}}
  ports: 8000
setup: |
  pip install vllm
run: |
  echo 'Starting vllm api server...'
  vllm serve $MODEL_NAME \\
    --tensor-parallel-size $SKYPILOT_NUM_GPUS_PER_NODE \\
    {F}
""",
    ),
    # LMCache/LMCache examples docker compose: entrypoint + command as a string.
    "compose-entrypoint-and-string-command": (
        "docker-compose.yml",
        f"""\
services:
  vllm:
    image: lmcache/vllm-openai:v0.3.1
    entrypoint: ["vllm", "serve"]
    command: "m --port 8000 {F}"
""",
    ),
    # vllm-project/vllm docs/deployment/docker.md: docker run IMAGE ARGS in a script.
    "docker-run-args-only": (
        "run.sh",
        f"""\
#!/bin/bash
docker run --runtime nvidia --gpus all \\
    -v ~/.cache/huggingface:/root/.cache/huggingface \\
    -p 8000:8000 --ipc=host \\
    vllm/vllm-openai:v0.20.0 \\
    --model m {F}
""",
    ),
    # podman with an explicit entrypoint override and the command after the image.
    "podman-run-command": (
        "serve.sh",
        f"""\
podman run --rm --device nvidia.com/gpu=all quay.io/modh/vllm:rhoai-2.20 \\
  python3 -m vllm.entrypoints.openai.api_server --model m {F}
""",
    ),
    # vllm-project/vllm and LMCache/LMCache .github/workflows: a CI job that starts the
    # server in a run: step, env at workflow and step level, ${{ }} expressions.
    "github-actions-run": (
        "e2e.yml",
        f"""\
name: e2e
on:
  pull_request:
env:
  VLLM_LOGGING_LEVEL: DEBUG
jobs:
  serve:
    runs-on: [self-hosted, gpu]
    steps:
      - uses: actions/checkout@v4
      - name: Start vLLM
        env:
          HF_TOKEN: ${{{{ secrets.HF_TOKEN }}}}
        run: |
          python -m vllm.entrypoints.openai.api_server \\
            --model ${{{{ matrix.model }}}} \\
            {F} &
          sleep 60
""",
    ),
    # A script that writes its --config with a here-document, then serves with it.
    "heredoc-config": (
        "start.sh",
        f"""\
#!/bin/sh
cat > /tmp/vllm.yaml <<'EOF'
model: m
{F[2:]}: true
EOF
vllm serve --config /tmp/vllm.yaml
""",
    ),
    # ai-dynamo/dynamo examples/backends/vllm/launch/disagg_lmcache.sh: a Dynamo frontend
    # and vLLM workers started by `python3 -m dynamo.vllm`, Dynamo's options among vLLM's.
    "dynamo-launch-script": (
        "disagg.sh",
        f"""\
#!/bin/bash
set -e
python -m dynamo.frontend --router-mode kv &
CUDA_VISIBLE_DEVICES=1 \\
  python3 -m dynamo.vllm \\
    --model Qwen/Qwen3-0.6B \\
    --is-prefill-worker \\
    --connector lmcache nixl \\
    {F}
""",
    ),
    # A vLLM --config file: its keys are flags.
    "vllm-config-file": (
        "config.yaml",
        f"""\
model: m
tensor-parallel-size: 2
{F[2:]}: true
""",
    ),
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_removed_flag_found_at_its_line(tmp_path: Path, shape: str) -> None:
    name, text = SHAPES[shape]
    expected_line = (
        line_of(text, F[2:])
        if shape in ("heredoc-config", "vllm-config-file")
        else (line_of(text, F))
    )
    assert removed_in_text(tmp_path / shape, name, text) == [(name, expected_line)]


def test_production_stack_values_map_to_the_rendered_command() -> None:
    _, text = SHAPES["production-stack-extra-args"]
    (invocation,) = read_text(text, "values.yaml")
    words = [t.text for t in invocation.tokens]
    assert words[:5] == ["meta-llama/Llama-3.1-8B-Instruct", "--host", "0.0.0.0", "--port", "8000"]
    assert "--no-enable-prefix-caching" in words  # written whenever vllmConfig is given
    config = json.loads(words[words.index("--kv-transfer-config") + 1])
    assert config == {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"}
    env = {e.name: (e.value, e.location.line if e.location else None) for e in invocation.env}
    assert env["LMCACHE_MAX_LOCAL_CPU_SIZE"] == ("20", line_of(text, "cpuOffloadingBufferSize"))
    max_len = next(t for t in invocation.tokens if t.text == "4096")
    assert max_len.location is not None and max_len.location.line == line_of(text, "maxModelLen")
    assert invocation.image == "vllm/vllm-openai:v0.20.0"


def test_helm_values_are_not_read_as_a_vllm_config() -> None:
    values = "servingEngineSpec:\n  modelSpec: []\nrouterSpec:\n  enableRouter: true\n"
    assert detect_kind(values, "values.yaml") == "helm-values"
    unrelated = "replicaCount: 1\nimage:\n  repository: nginx\nservice:\n  port: 80\n"
    assert detect_kind(unrelated, "values.yaml") is None  # not "vllm-config"
    assert detect_kind(SHAPES["vllm-config-file"][1], "anything.yaml") == "vllm-config"


def test_chart_templates_are_skipped_with_the_command_to_render_them(tmp_path: Path) -> None:
    template = tmp_path / "templates" / "deployment.yaml"
    template.parent.mkdir()
    template.write_text(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {{ .Release.Name }}\n"
        "spec:\n  replicas: {{ .Values.replicaCount }}\n"
    )
    found = read_input_set([template])
    assert found.invocations == []
    (skipped,) = found.skipped
    assert (
        not skipped.problem
        and "helm template" in skipped.reason
        and "kvtool audit -" in (skipped.reason)
    )


def test_invalid_yaml_is_one_line_and_the_run_goes_on(tmp_path: Path) -> None:
    (tmp_path / "broken.yaml").write_text("apiVersion: v1\nkind: Pod\nspec: [1, 2\n")
    name, text = SHAPES["docker-run-args-only"]
    (tmp_path / name).write_text(text)
    found = read_input_set([tmp_path])
    assert [Path(i.file or "").name for i in found.invocations] == [name]
    (broken,) = [s for s in found.skipped if s.problem]
    assert broken.file.endswith("broken.yaml") and "invalid YAML" in broken.reason
    assert "\n" not in broken.reason


def test_the_registry_is_the_one_list_of_kinds() -> None:
    assert tuple(reader.kind for reader in READERS) == FILE_FORMATS
    assert len(set(FILE_FORMATS)) == len(FILE_FORMATS)
    assert all(f"| `{kind}` |" in describe() for kind in FILE_FORMATS)
    committed = Path(__file__).resolve().parents[3] / "docs" / "audit-inputs.md"
    assert committed.read_text(encoding="utf-8") == describe(), "run scripts/gen_rule_docs.py"


def test_stdin_with_a_filename(kvtool_cli, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    import io

    _, text = SHAPES["skypilot-run"]
    monkeypatch.setattr("sys.stdin", io.StringIO(text))
    result = kvtool_cli(
        "audit", "-", "--stdin-filename", "task.yaml", "--vllm-version", GONE_AT,
        "--output-format", "json",
    )  # fmt: skip
    assert result.exit_code == 1, result.stderr
    report = json.loads(result.stdout)
    (finding,) = [f for f in report["findings"] if f["code"] == "VG002"]
    assert finding["location"]["file"] == "task.yaml"
    assert finding["location"]["line"] == line_of(text, F)
    bad = kvtool_cli("audit", "x.sh", "--stdin-filename", "task.yaml")
    assert bad.exit_code == 2 and "--stdin-filename" in bad.stderr


def test_cli_names_skipped_files_only_with_verbose(kvtool_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "ci.yaml").write_text("jobs:\n  test:\n    runs-on: ubuntu-latest\n")
    name, text = SHAPES["docker-run-args-only"]
    (tmp_path / name).write_text(text.replace(F, "--port 8000"))
    quiet = kvtool_cli("audit", str(tmp_path), "--vllm-version", GONE_AT)
    assert quiet.exit_code == 0, quiet.stderr
    assert "1 file(s) skipped" in quiet.stderr and "ci.yaml" not in quiet.stderr
    loud = kvtool_cli("audit", str(tmp_path), "--vllm-version", GONE_AT, "--verbose")
    assert "skipped" in loud.stderr and "ci.yaml" in loud.stderr


def test_cli_prints_invocation_notes_only_with_verbose(kvtool_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A reader's note (here: a --config file that is not in the input) reaches the user
    on stderr with --verbose; stdout keeps only the report."""
    (tmp_path / "run.sh").write_text("#!/bin/sh\nvllm serve m --config /etc/vllm/missing.yaml\n")
    quiet = kvtool_cli("audit", str(tmp_path / "run.sh"), "--vllm-version", GONE_AT)
    (invocation,) = read_text((tmp_path / "run.sh").read_text(), str(tmp_path / "run.sh"))
    assert invocation.notes, "the reader must note the missing --config file"
    note = invocation.notes[0]
    assert note not in quiet.stderr and note not in quiet.stdout
    loud = kvtool_cli("audit", str(tmp_path / "run.sh"), "--vllm-version", GONE_AT, "--verbose")
    assert f"kvtool: note: {invocation.label}: {note}" in loud.stderr
    assert note not in loud.stdout


def test_duplicate_keys_are_said_in_config_and_compose_files() -> None:
    config = "model: m\nmax-num-seqs: 8\nmax-num-seqs: 16\n"
    (invocation,) = read_text(config, "c.yaml")
    assert any("'max-num-seqs' is written twice (first at line 2)" in n for n in invocation.notes)
    assert [v for k, v, _ in invocation.config_items if k == "max-num-seqs"] == [8, 16]
    compose = "services:\n  vllm:\n    image: vllm/vllm-openai:v0.20.0\n    command: [m]\n"
    (served,) = read_text(compose + "    command: [m2]\n", "docker-compose.yml")
    assert [t.text for t in served.tokens] == ["m2"]  # the last one wins
    assert any("'command' is written twice" in n for n in served.notes)


def _chart(root: Path) -> Path:
    """A chart in the layout of vllm-project/vllm examples/online_serving/chart-helm."""
    (root / "templates").mkdir(parents=True)
    (root / "Chart.yaml").write_text("apiVersion: v2\nname: demo\nversion: 0.1.0\n")
    (root / "values.yaml").write_text(f"image: {{repository: vllm/vllm-openai, tag: v0.20.0}}\n"
                                      f"args: [m, '{F}']\n")  # fmt: skip
    (root / "templates" / "deployment.yaml").write_text(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {{ .Release.Name }}-vllm\n"
        "spec:\n  template:\n    spec:\n      containers:\n        - name: vllm\n"
        '          image: "{{ .Values.image.repository }}:{{ .Values.image.tag }}"\n'
        "          args: {{ toYaml .Values.args | nindent 12 }}\n"
    )
    return root


def test_chart_templates_render_with_the_helm_extra(tmp_path: Path) -> None:
    pytest.importorskip("helm_python")
    chart = _chart(tmp_path / "chart")
    found = read_input_set([chart])
    (invocation,) = found.invocations
    assert invocation.file is not None and invocation.file.endswith("deployment.yaml#rendered")
    assert [t.text for t in invocation.tokens] == ["m", F]
    assert invocation.image == "vllm/vllm-openai:v0.20.0"


def test_shipped_production_stack_example_maps_env_to_the_value_that_sets_it() -> None:
    example = Path(__file__).resolve().parents[3] / "examples" / "production-stack-values.yaml"
    (invocation,) = read_input_set([example]).invocations
    text = example.read_text(encoding="utf-8")
    env = {e.name: e for e in invocation.env}
    # The chart adds LMCache's variables when lmcacheConfig.enabled is set: they point there.
    timeout = env["VLLM_RPC_TIMEOUT"].location
    assert timeout is not None and timeout.line == line_of(text, "enabled: true")
    assert env["PYTHONHASHSEED"].value == "0"


@pytest.mark.parametrize("output_format", ["github", "sarif", "text", "json"])
def test_an_unreadable_file_is_in_every_report_format(  # type: ignore[no-untyped-def]
    kvtool_cli, tmp_path: Path, output_format: str
) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("apiVersion: v1\nkind: Pod\nspec: [1, 2\n")
    fine = tmp_path / "serve.sh"
    fine.write_text("vllm serve org/model\n")
    result = kvtool_cli("audit", str(fine), str(broken), "--output-format", output_format)
    assert result.exit_code == 1, result.stderr  # it may hide a server: the run fails
    alone = kvtool_cli("audit", str(broken), "--output-format", output_format)
    assert alone.exit_code == 2 and "invalid YAML" in alone.stderr  # nothing could be read
    assert "broken.yaml" in result.stdout and "invalid YAML" in result.stdout
    if output_format == "sarif":
        import jsonschema

        schema_path = Path(__file__).resolve().parents[2] / "data" / "sarif-schema-2.1.0.json"
        jsonschema.validate(json.loads(result.stdout), json.loads(schema_path.read_text()))


@pytest.mark.parametrize(
    ("name", "is_dockerfile"),
    [("Dockerfile", True), ("Dockerfile.cuda", True), ("Containerfile", True),
     ("serve.dockerfile", True), ("dockerfile.py", False), ("Dockerfile.md", False)],
)  # fmt: skip
def test_dockerfile_names(tmp_path: Path, name: str, is_dockerfile: bool) -> None:
    from kvtool.audit.inputs.registry import never_read

    text = "from os import path\n" if name.endswith(".py") else "FROM vllm/vllm-openai:v0.20.0\n"
    assert (detect_kind(text, name) == "dockerfile") is is_dockerfile
    # documentation is never opened, whatever its name says
    assert (never_read(name) is not None) is name.endswith(".md")


def test_compose_merge_keys_carry_the_shared_service(tmp_path: Path) -> None:
    # Compose "extension fields" with YAML anchors (docs.docker.com/compose/multiple-compose-files/
    # and the compose spec's x- fields): the service's own keys win over the merged ones.
    text = f"""\
x-vllm: &vllm
  image: vllm/vllm-openai:v0.20.0
  command: ["m", "--port", "8000"]
services:
  a:
    <<: *vllm
  b:
    <<: *vllm
    command: ["m", "{F}"]
"""
    assert removed_in_text(tmp_path, "compose.yaml", text) == [("compose.yaml", line_of(text, F))]
    invocations = read_text(text, "compose.yaml")
    assert [i.image for i in invocations] == ["vllm/vllm-openai:v0.20.0"] * 2


def test_github_actions_steps_carry_their_env_and_docker_runs() -> None:
    _, text = SHAPES["github-actions-run"]
    (invocation,) = read_text(text, "e2e.yml")
    env = {e.name: e.value for e in invocation.env}
    assert env == {"VLLM_LOGGING_LEVEL": "DEBUG", "HF_TOKEN": None}  # a secret: unknown here
    assert "job serve, Start vLLM" in invocation.label
    docker = text.replace(
        "python -m vllm.entrypoints.openai.api_server",
        "docker run --gpus all vllm/vllm-openai:v0.20.0",
    )
    (in_docker,) = read_text(docker, "e2e.yml")
    assert in_docker.image == "vllm/vllm-openai:v0.20.0"
    assert [t.text for t in in_docker.tokens][-1] == F
