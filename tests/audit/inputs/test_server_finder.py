"""The server is found in every form a deployment starts vLLM from (issue 22).

Each fixture is written here in the shape of the public file cited above it (not
copied). Every one carries the same removed flag (``REMOVED``, gone at ``GONE_AT``),
so "found" is checked as a user sees it: the removed flag is reported at its line.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kvtool.audit.inputs import read_input_set
from kvtool.audit.inputs.registry import FILE_FORMATS, GENERIC
from tests.audit.inputs.removed_flag import GONE_AT, REMOVED, line_of, removed_at

F = REMOVED

FORMS: dict[str, tuple[str, str]] = {
    # https://github.com/kelvincushman/ContentSwarm AI-server guide: vllm.service.
    "systemd": (
        "vllm.service",
        f"""\
[Unit]
Description=vLLM server
After=network-online.target

[Service]
Environment="VLLM_USE_V1=1" HF_HOME=/srv/hf
EnvironmentFile=-/etc/vllm/env
ExecStart=/usr/bin/env vllm serve org/model-9b \\
    --served-model-name m9 --port 8000 \\
    {F}
Restart=on-failure

[Install]
WantedBy=multi-user.target
""",
    ),
    # https://github.com/modal-projects/open-source-av-ragbot
    # server/services/modal_rag/vllm_server.py: a Modal app's argv list and image env.
    "modal-python": (
        "vllm_server.py",
        f"""\
import modal

vllm_image = modal.Image.debian_slim().uv_pip_install("vllm").env({{"VLLM_USE_V1": "1"}})
MODEL_NAME = "org/model-4b"
VLLM_PORT = 8000
N_GPU = 1
app = modal.App("vllm-service")


@app.function(image=vllm_image)
@modal.web_server(port=VLLM_PORT)
def serve():
    import subprocess

    cmd = [
        "vllm",
        "serve",
        "--uvicorn-log-level=info",
        MODEL_NAME,
        "--port",
        str(VLLM_PORT),
    ]
    cmd += ["--tensor-parallel-size", str(N_GPU)]
    cmd += ["{F}"]
    subprocess.Popen(" ".join(cmd), shell=True)
""",
    ),
    # https://github.com/tomasruizt/llm_app Makefile: a recipe over backslashed lines.
    "makefile": (
        "Makefile",
        f"""\
MODEL_NAME ?= "org/model-3b"  # override on the command line
PORT ?= 8000

.PHONY: serve

serve:
\t@echo "starting"
\tpython -m vllm.entrypoints.openai.api_server \\
\t\t--model $(MODEL_NAME) \\
\t\t--port $(PORT) \\
\t\t{F}
""",
    ),
    # https://github.com/dstackai/dstack docs/docs/services.md: commands: with env:.
    "dstack": (
        "service.dstack.yml",
        f"""\
type: service
name: llama31
python: "3.11"
env:
  - HF_TOKEN
  - MODEL_ID=org/model-8b
commands:
  - pip install vllm
  - vllm serve $MODEL_ID
    --tensor-parallel-size $DSTACK_GPUS_NUM
    {F}
port: 8000
""",
    ),
    # https://github.com/dzianisv/poept server.nomad: a docker task with config args.
    "nomad": (
        "vllm.nomad",
        f"""\
job "vllm" {{
  group "serve" {{
    task "engine" {{
      driver = "docker"
      config {{
        image = "vllm/vllm-openai:v0.20.0"
        args  = ["--model", "org/model-8b", "--port", "${{NOMAD_PORT_http}}",
                 "{F}"]
      }}
      env {{
        VLLM_USE_V1 = "1"
      }}
    }}
  }}
}}
""",
    ),
    # https://cloudinit.readthedocs.io/en/latest/reference/modules.html#runcmd
    "cloud-init": (
        "user-data.yaml",
        f"""\
#cloud-config
package_update: true
runcmd:
  - pip install vllm
  - [vllm, serve, org/model-8b, --port, "8000", "{F}"]
""",
    ),
    # A composite action "Setup VLLM": runs.steps[].run with docker run IMAGE ARGS
    # (https://github.com/meta-llama/llama-stack .github/actions/setup-vllm/action.yml).
    "composite-action": (
        "action.yml",
        f"""\
name: Setup VLLM
description: Start VLLM
runs:
  using: "composite"
  steps:
    - name: Start VLLM
      shell: bash
      run: |
        docker run -d --name vllm -p 8000:8000 \\
          vllm/vllm-openai:v0.20.0 \\
          --model org/model-1b \\
          {F}
""",
    ),
    # A bootstrap script that writes the start script with a here-document
    # (https://www.gnu.org/software/bash/manual/html_node/Redirections.html#Here-Documents)
    # and installs vLLM first, as GPU VM user-data scripts do.
    "heredoc-start-script": (
        "bootstrap.sh",
        f"""\
#!/bin/bash
set -e
pip install vllm
cat <<'EOF' > /opt/run.sh
#!/bin/bash
exec vllm serve org/model-8b --port 8000 \\
  {F}
EOF
chmod +x /opt/run.sh
""",
    ),
    # A test harness's scenario: env_common: and a folded server_cmd: per node
    # (https://github.com/vllm-project/vllm-ascend
    # tests/e2e/nightly/multi_node/config/Qwen3-235B-A22B.yaml).
    "harness-block-scalar": (
        "scenario.yaml",
        f"""\
test_name: "multi-dp"
model: "org/model-235b"
env_common:
  VLLM_USE_MODELSCOPE: true
  SERVER_PORT: 8080
deployment:
  -
    server_cmd: >
        vllm serve "org/model-235b"
        --host 0.0.0.0
        --port $SERVER_PORT
        --data-parallel-size 4
        {F}
benchmarks:
  perf:
    num_prompts: 2800
""",
    ),
    # Slurm batch script (.sbatch): #SBATCH directives, then srun starts the server
    # (https://slurm.schedmd.com/sbatch.html).
    "sbatch": (
        "serve.sbatch",
        f"""\
#!/bin/bash
#SBATCH --gres=gpu:1
#SBATCH --time=04:00:00
module load cuda
srun vllm serve org/model-8b --port 8000 {F}
""",
    ),
    # The argv-list form of Python launchers (modal-projects/open-source-av-ragbot
    # vllm_server.py) written in a TOML task file (no reader): the finder reads the list.
    "toml-argv-list": (
        "tasks.toml",
        f"""\
[tasks.serve]
description = "start the server"
cmd = ["vllm", "serve", "org/model-8b", "--port", "8000", "{F}"]
""",
    ),
    # Values of a chart kvtool has no map for: an argument list beside the image, as
    # vllm-project/vllm examples/online_serving/chart-helm values.yaml's extraArgs.
    "chart-values-args": (
        "values.yaml",
        f"""\
replicaCount: 1
image:
  repository: vllm/vllm-openai
  tag: v0.20.0
server:
  port: 8000
  extraCmdArgs:
    - --max-model-len=8192
    - {F}
    - --gpu-memory-utilization
    - "0.9"
""",
    ),
    # A KServe InferenceService patch of a kustomize overlay: predictor.model.args
    # (https://kserve.github.io/website/docs/model-serving/generative-inference/overview).
    "kserve-kustomize-patch": (
        "isvc-patch.yaml",
        f"""\
apiVersion: serving.kserve.io/v1beta1
kind: InferenceService
metadata:
  name: llm
spec:
  predictor:
    model:
      modelFormat:
        name: vllm
      args:
        - --max-model-len=4096
        - {F}
""",
    ),
    # Terraform's kubernetes provider: a container block's image and args (HCL, no
    # reader): https://registry.terraform.io/providers/hashicorp/kubernetes/latest/docs/resources/deployment
    "terraform-container": (
        "main.tf",
        f"""\
resource "kubernetes_deployment" "vllm" {{
  spec {{
    template {{
      spec {{
        container {{
          name  = "vllm"
          image = "vllm/vllm-openai:v0.20.0"
          args  = ["--model", "org/model-8b",
                   "{F}"]
        }}
      }}
    }}
  }}
}}
""",
    ),
    # supervisord program section: command= glued to the command
    # (https://supervisord.org/configuration.html#program-x-section-settings).
    "supervisord": (
        "vllm.conf",
        f"""\
[program:vllm]
command=/opt/venv/bin/vllm serve org/model-8b --port 8000 {F}
autorestart=true
""",
    ),
    # An Ansible task running the server through the shell module, with Jinja fields
    # (https://docs.ansible.com/ansible/latest/collections/ansible/builtin/shell_module.html).
    "ansible-shell": (
        "playbook.yml",
        f"""\
- hosts: gpu
  vars:
    model: org/model-8b
  tasks:
    - name: start vllm
      ansible.builtin.shell: >
        nohup vllm serve {{{{ model }}}} --port {{{{ vllm_port }}}}
        --max-model-len {{{{ max_len | default(4096) }}}} {F} &
""",
    ),
    # VS Code's launch.json running vLLM's server module with args and env
    # (https://code.visualstudio.com/docs/python/debugging#_module).
    "vscode-launch": (
        "launch.json",
        f"""\
{{
  "version": "0.2.0",
  "configurations": [
    {{
      "name": "vLLM server",
      "type": "debugpy",
      "request": "launch",
      "module": "vllm.entrypoints.openai.api_server",
      "args": ["--model", "org/model-8b", "--port", "8000",
               "{F}"],
      "env": {{"VLLM_LOGGING_LEVEL": "DEBUG"}}
    }}
  ]
}}
""",
    ),
    # A justfile recipe with {{{{var}}}} interpolation.
    "justfile": (
        "justfile",
        f"""\
model := "org/model-8b"

serve port="8000":
    uv run vllm serve {{{{model}}}} --port {{{{port}}}} \\
        {F}
""",
    ),
}


def _write(tmp_path: Path, form: str) -> Path:
    name, text = FORMS[form]
    path = tmp_path / form / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize("form", sorted(FORMS))
def test_each_form_is_found_with_the_flag_at_its_line(tmp_path: Path, form: str) -> None:
    path = _write(tmp_path, form)
    found = read_input_set([path])
    assert found.invocations, found.skipped
    assert [line for _, line in removed_at(found)] == [line_of(FORMS[form][1], F)]


def test_readers_say_which_read_it(tmp_path: Path) -> None:
    kinds = {
        form: {i.kind for i in read_input_set([_write(tmp_path, form)]).invocations}
        for form in FORMS
    }
    assert kinds["systemd"] == {"systemd"} and kinds["modal-python"] == {"python"}
    assert kinds["makefile"] == {"makefile"} and kinds["nomad"] == {"nomad"}
    assert kinds["composite-action"] == {"github-actions"}
    assert kinds["toml-argv-list"] == {"generic"} and kinds["harness-block-scalar"] == {"generic"}
    # every kind an invocation reports is one the registry lists (or the finder's)
    assert set().union(*kinds.values()) <= {*FILE_FORMATS, GENERIC}
    (generic,) = read_input_set([_write(tmp_path, "toml-argv-list")]).invocations
    assert any("generic server finder" in note for note in generic.notes)


def test_an_argument_list_beside_another_server_is_not_vllm(tmp_path: Path) -> None:
    path = tmp_path / "values.yaml"
    path.write_text(
        "image:\n  repository: lmsysorg/sglang\n  tag: v0.4.6\n"
        "extraArgs: [--max-model-len=8192, --enforce-eager]\n"
        "vllmCompat: true\n",
        encoding="utf-8",
    )
    assert read_input_set([path]).invocations == []


def _env(form: str, tmp_path: Path) -> dict[str, str | None]:
    (invocation,) = read_input_set([_write(tmp_path, form)]).invocations
    return {e.name: e.value for e in invocation.env}


def test_readers_carry_the_environment(tmp_path: Path) -> None:
    assert _env("systemd", tmp_path) == {"VLLM_USE_V1": "1", "HF_HOME": "/srv/hf"}
    assert _env("modal-python", tmp_path) == {"VLLM_USE_V1": "1"}
    assert _env("nomad", tmp_path) == {"VLLM_USE_V1": "1"}
    assert _env("dstack", tmp_path) == {"HF_TOKEN": None, "MODEL_ID": "org/model-8b"}
    assert _env("vscode-launch", tmp_path) == {"VLLM_LOGGING_LEVEL": "DEBUG"}
    # the generic finder: an env mapping written above the command
    assert _env("harness-block-scalar", tmp_path) == {
        "VLLM_USE_MODELSCOPE": "true",
        "SERVER_PORT": "8080",
    }


def test_python_values_computed_at_run_time_are_not_guessed(tmp_path: Path) -> None:
    path = tmp_path / "runner.py"
    path.write_text(
        "import subprocess\n"
        "def start(model, port, extra=None):\n"
        '    cmd = ["vllm", "serve", model, "--port", str(port), *(extra or [])]\n'
        "    subprocess.Popen(cmd)\n"
        "def start_string(model, gpus):\n"
        '    subprocess.run(f"vllm serve {model} --tensor-parallel-size {gpus}", shell=True)\n',
        encoding="utf-8",
    )
    listed, formatted = read_input_set([path]).invocations
    assert [t.text for t in listed.tokens] == ["${model}", "--port", "${port}"]
    assert [t.text for t in formatted.tokens] == ["${model}", "--tensor-parallel-size", "${gpus}"]
    assert formatted.tokens[2].location is not None and formatted.tokens[2].location.line == 6


def test_makefile_trailing_backslash_draws_no_false_invalid_number(tmp_path: Path) -> None:
    """make ends a recipe at its last tab line even after a trailing backslash; the
    next rule's name is no value of ``--max-model-len``."""
    from kvtool.audit.engine import Auditor
    from kvtool.audit.normalize import normalize
    from kvtool.audit.settings import AuditSettings
    from kvtool.audit.tables import ShippedTables

    path = tmp_path / "Makefile"
    path.write_text(
        "serve:\n\tvllm serve org/m \\\n\t\t--max-model-len \\\nstop:\n\tpkill -f vllm\n",
        encoding="utf-8",
    )
    found = read_input_set([path])
    (invocation,) = found.invocations
    assert [t.text for t in invocation.tokens] == ["org/m", "--max-model-len"]
    report = Auditor(
        ShippedTables(), normalize, AuditSettings(vllm_version=GONE_AT), version_from_cli=True
    ).run(found.invocations)
    assert "VG006" not in {f.code for f in report.findings}


def test_dockerfile_env_feeds_the_env_rules(tmp_path: Path) -> None:
    path = tmp_path / "Dockerfile"
    path.write_text(
        "FROM vllm/vllm-openai:v0.20.0\n"
        "ARG CPU_SIZE=40\n"
        "ENV VLLM_USE_V1 1\n"
        "ENV LMCACHE_MAX_LOCAL_CPU_SIZE=${CPU_SIZE} LMCACHE_CHUNK_SIZE=256\n"
        'CMD ["org/m", "--port", "8000"]\n',
        encoding="utf-8",
    )
    (invocation,) = read_input_set([path]).invocations
    env = {e.name: (e.value, e.location.line if e.location else None) for e in invocation.env}
    assert env == {
        "VLLM_USE_V1": ("1", 3),
        "LMCACHE_MAX_LOCAL_CPU_SIZE": ("40", 4),
        "LMCACHE_CHUNK_SIZE": ("256", 4),
    }


def test_mentions_of_a_command_start_nothing(tmp_path: Path) -> None:
    """A docstring, a log line, an error message or a commented-out line only mentions
    ``vllm serve``: none is a server start."""
    launcher = tmp_path / "tool.py"
    launcher.write_text(
        '"""Start it with ``vllm serve MODEL --port 8000``."""\n'
        "import logging\n"
        'logging.info("run vllm serve m --calculate-kv-scales yourself")\n'
        "def check(found):\n"
        "    if not found:\n"
        '        raise SystemExit("no server: start vllm serve m first")\n',
        encoding="utf-8",
    )
    notes = tmp_path / "tasks.toml"
    notes.write_text('# cmd = "vllm serve m --port 8000"\nname = "x"\n', encoding="utf-8")
    program = tmp_path / "main.go"
    program.write_text(
        'package main\nimport "errors"\n'
        'var errDown = errors.New("no server: start one with vllm serve m --port 8000")\n',
        encoding="utf-8",
    )
    described = tmp_path / "catalog.yaml"
    described.write_text(
        "models:\n  - name: m\n    description: Use vllm serve m --max-num-seqs 4 to host it\n",
        encoding="utf-8",
    )
    found = read_input_set([launcher, notes, program, described])
    assert found.invocations == []
    assert {Path(s.file).name for s in found.skipped} == {
        "tool.py", "tasks.toml", "main.go", "catalog.yaml"
    }  # fmt: skip


def test_runtime_values_are_named_in_a_note(tmp_path: Path) -> None:
    path = tmp_path / "bench.py"
    path.write_text(
        "import subprocess\n"
        "def start(model, port):\n"
        '    subprocess.Popen(["vllm", "serve", model, "--port", str(port)])\n',
        encoding="utf-8",
    )
    (invocation,) = read_input_set([path]).invocations
    assert any("${model}, ${port}" in note for note in invocation.notes)


def test_cloud_init_reads_the_start_script_it_writes(tmp_path: Path) -> None:
    path = tmp_path / "user-data"
    text = f"""\
#cloud-config
write_files:
  - path: /opt/start-vllm.sh
    permissions: "0755"
    content: |
      #!/bin/bash
      exec vllm serve org/model-8b --port 8000 {F}
runcmd:
  - /opt/start-vllm.sh
"""
    path.write_text(text, encoding="utf-8")
    found = read_input_set([path])
    assert [i.kind for i in found.invocations] == ["cloud-init"]
    assert "write_files /opt/start-vllm.sh" in found.invocations[0].label
    assert [line for _, line in removed_at(found)] == [line_of(text, F)]


def test_python_interpreter_module_start(tmp_path: Path) -> None:
    path = tmp_path / "launch.py"
    text = f"""\
import subprocess
import sys

def main():
    subprocess.run(
        [sys.executable, "-m", "vllm.entrypoints.openai.api_server",
         "--model", "org/model-8b", "{F}"],
        check=True,
    )
"""
    path.write_text(text, encoding="utf-8")
    found = read_input_set([path])
    assert [t.text for t in found.invocations[0].tokens][:2] == ["--model", "org/model-8b"]
    assert [line for _, line in removed_at(found)] == [line_of(text, F)]


def test_a_mapping_of_vllm_flags_under_a_vllm_key(tmp_path: Path) -> None:
    # Shape: https://github.com/inference-sim/pytools data/README.md, a benchmark
    # runner's config with the server's settings under `vllm:`.
    path = tmp_path / "config.yaml"
    text = """\
test:
  baseline:
    model: "org/model-0.5b"
    vllm:
      gpu_memory_utilization: 0.4
      calculate_kv_scales: true
      max_model_len: 2048
    benchmark:
      backend: "vllm"
      num_prompts: 5000
"""
    path.write_text(text, encoding="utf-8")
    found = read_input_set([path])
    (invocation,) = found.invocations
    assert [key for key, _, _ in invocation.config_items] == [
        "gpu_memory_utilization", "calculate_kv_scales", "max_model_len"
    ]  # fmt: skip
    assert [line for _, line in removed_at(found)] == [line_of(text, "calculate_kv_scales")]
    # a mapping whose keys are not vLLM's is no server, whatever its key says
    other = tmp_path / "other.yaml"
    other.write_text("vllm_dashboard:\n  theme: dark\n  refresh: 5\n", encoding="utf-8")
    assert read_input_set([other]).invocations == []


def test_template_fields_are_runtime_values(tmp_path: Path) -> None:
    (invocation,) = read_input_set([_write(tmp_path, "ansible-shell")]).invocations
    assert [t.text for t in invocation.tokens][:5] == [
        "${model}", "--port", "${vllm_port}", "--max-model-len", "${max_len_default_4096}"
    ]  # fmt: skip


def test_python_splat_of_a_written_list_and_string_sums(tmp_path: Path) -> None:
    path = tmp_path / "serve.py"
    text = f"""\
import subprocess
MODEL = "org/model-8b"
ARGS = ["--model", MODEL, "{F}"]

def start(port):
    subprocess.Popen(["python", "-m", "vllm.entrypoints.openai.api_server", *ARGS])
    cmd = "vllm serve " + MODEL + " --port " + str(port) + " --max-num-seqs 8"
    subprocess.run(cmd, shell=True)
"""
    path.write_text(text, encoding="utf-8")
    found = read_input_set([path])
    splat, summed = found.invocations
    assert [t.text for t in splat.tokens] == ["--model", "org/model-8b", F]
    assert [t.text for t in summed.tokens] == [
        "org/model-8b", "--port", "${port}", "--max-num-seqs", "8"
    ]  # fmt: skip
    assert [line for _, line in removed_at(found)] == [line_of(text, F)]


def test_a_ci_job_gives_its_variables_and_image(tmp_path: Path) -> None:
    # Shape: a GitLab CI job (https://docs.gitlab.com/ci/yaml/: variables, image, script).
    path = tmp_path / ".gitlab-ci.yml"
    text = f"""\
variables:
  MODEL: org/model-8b
serve-job:
  image: vllm/vllm-openai:v0.20.0
  script:
    - vllm serve $MODEL --port 8000 {F} &
"""
    path.write_text(text, encoding="utf-8")
    found = read_input_set([path])
    (invocation,) = found.invocations
    assert invocation.image == "vllm/vllm-openai:v0.20.0"
    assert invocation.tokens[0].text == "org/model-8b"
    assert [line for _, line in removed_at(found)] == [line_of(text, F)]


def test_python_argv_built_from_written_lists(tmp_path: Path) -> None:
    """A list written once and used in several commands (``BASE + [...]``) is read in
    each, and is no command of its own."""
    path = tmp_path / "runner.py"
    text = f"""\
import subprocess
BASE = ["vllm", "serve"]
EXTRA = ["{F}"]

def first(model):
    subprocess.Popen(BASE + [model, "--port", "8000"] + EXTRA)

def second(model):
    cmd = BASE + [model, "--port", "8001"]
    cmd.append("--max-num-seqs")
    cmd.append("8")
    subprocess.Popen(cmd)
"""
    path.write_text(text, encoding="utf-8")
    first, second = read_input_set([path]).invocations
    assert [t.text for t in first.tokens] == ["${model}", "--port", "8000", F]
    assert [t.text for t in second.tokens] == [
        "${model}", "--port", "8001", "--max-num-seqs", "8"
    ]  # fmt: skip
