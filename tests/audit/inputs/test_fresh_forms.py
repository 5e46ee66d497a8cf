"""Forms a second fresh sample of public files started vLLM in (issue 22, second round).

Each fixture is written here in the shape of the public file cited above it (not
copied). The server is "found" as a user sees it: a removed flag written inside the
shape (``REMOVED``, gone at ``GONE_AT``) is reported at the line it was written on.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kvtool.audit.inputs import read_input_set
from kvtool.audit.inputs.command_line import LEGACY_API_SERVER_NOTE
from kvtool.audit.vllm_release import claims_in_text
from kvtool.releases import available_versions, release_index
from tests.audit.inputs.removed_flag import REMOVED, line_of, removed_at, removed_in_text

F = REMOVED


def _still_has(flag: str) -> str:
    """The last release that has ``flag``, which a later release removed."""
    gone = release_index().flags[flag].gone_at
    assert gone is not None
    versions = available_versions()
    return versions[versions.index(gone) - 1]


def _audit(kvtool_cli: Any, *args: str) -> dict[str, Any]:
    result = kvtool_cli("audit", *args, "--output-format", "json")
    assert result.exit_code in (0, 1), result.stderr
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def _removed_reported(report: dict[str, Any]) -> bool:
    return any(f["code"] == "VG002" and f["flag"] == REMOVED for f in report["findings"])


# -- Jupyter notebooks -------------------------------------------------------------------------

# Cells as nbformat 4 writes them (https://nbformat.readthedocs.io/en/latest/format_description.html,
# `source` a list of lines), laid out as Colab saves a vLLM tutorial
# (https://github.com/dongukmoon/misc/blob/main/vllm_quickstart_tutorial.ipynb: 2-space
# indent, a markdown cell above, pip's output in a stream); the `!python -m
# vllm.entrypoints.openai.api_server \` line continued over the next strings, as in
# Cloudera's CDSW vLLM notebooks.
_CELLS = [
    {"cell_type": "markdown", "metadata": {}, "source": [f"Run `vllm serve m {F}` below\n"]},
    {
        "cell_type": "code",
        "execution_count": 1,
        "metadata": {"id": "5BU1yI1tBbrA"},
        "outputs": [{"output_type": "stream", "name": "stdout", "text": [f"vllm serve old {F}\n"]}],
        "source": ["import subprocess\n", 'MODEL = "org/model-1b"\n', "%env VLLM_USE_V1=1\n"],
    },
    {
        "cell_type": "code",
        "execution_count": 2,
        "metadata": {},
        "outputs": [],
        "source": [
            "!python -m vllm.entrypoints.openai.api_server \\\n",
            "    --port $CDSW_APP_PORT --host 127.0.0.1 \\\n",
            "    --model ./models/vicuna-7b \\\n",
            f"    {F}",
        ],
    },
    {
        "cell_type": "code",
        "execution_count": 3,
        "metadata": {},
        "outputs": [],
        "source": [f'proc = subprocess.Popen(["vllm", "serve", MODEL, "{F}"])\n'],
    },
    {
        "cell_type": "code",
        "execution_count": None,
        "metadata": {},
        "outputs": [],
        "source": ["%%bash\n", f'nohup vllm serve "$MODEL" --port 8001 {F} &\n'],
    },
]


def test_a_notebooks_code_cells_are_read_where_they_are_written(tmp_path: Path) -> None:
    text = json.dumps(
        {"cells": _CELLS, "metadata": {}, "nbformat": 4, "nbformat_minor": 0}, indent=2
    )
    path = tmp_path / "serve.ipynb"
    path.write_text(text, encoding="utf-8")
    found = read_input_set([path])
    assert {i.kind for i in found.invocations} == {"notebook"}
    # the three cells that start a server, at their lines; the markdown and the output
    # that mention the flag are not starts
    assert [line for _, line in removed_at(found)] == [line_of(text, F, n) for n in (3, 4, 5)]
    escaped = next(i for i in found.invocations if [t.text for t in i.tokens][:1] == ["--port"])
    assert {e.name: e.value for e in escaped.env} == {"VLLM_USE_V1": "1"}  # from %env
    # a constant of an earlier cell is the model a later cell's list names
    assert any("org/model-1b" in [t.text for t in i.tokens] for i in found.invocations)


def test_a_notebook_is_walked_in_a_directory(tmp_path: Path) -> None:
    text = json.dumps({"cells": _CELLS[2:3], "metadata": {}, "nbformat": 4, "nbformat_minor": 5})
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "notebooks" / "serve.ipynb").write_text(text, encoding="utf-8")
    assert len(read_input_set([tmp_path]).invocations) == 1


# -- vllm.entrypoints.api_server, vLLM's demo server --------------------------------------------

LEGACY = {
    # vLLM's own KServe guide of its 0.2 releases: command python3 -m vllm.entrypoints.api_server
    # (https://github.com/vllm-project/vllm/blob/v0.2.7/docs/source/serving/deploying_with_kserve.rst).
    "isvc.yaml": f"""\
apiVersion: serving.kserve.io/v1beta1
kind: InferenceService
metadata:
  name: llama-2-7b
spec:
  predictor:
    containers:
      - args:
        - --port
        - "8080"
        - --model
        - /mnt/models
        - {F}
        command:
          - python3
          - -m
          - vllm.entrypoints.api_server
        image: kserve/vllmserver:latest
""",
    # https://github.com/Fluder-Paradyne/vllm_inference/blob/main/Dockerfile: CMD shell form.
    "Dockerfile": f"""\
FROM python:3.10-slim-buster
RUN pip install vllm ray
ARG model
ENV model=$model
CMD python -m vllm.entrypoints.api_server --model $model {F}
""",
    # A Go program's exec.Command argument list (an alt-text tool's llm_provider.go).
    "llm_provider.go": f"""\
package main

import "os/exec"

func startVLLMServer(model string) error {{
\tcmd := exec.Command("python3", "-m", "vllm.entrypoints.api_server",
\t\t"--model", model,
\t\t"--port", "8000", "{F}")
\treturn cmd.Start()
}}
""",
    # A FastAPI app's launcher list (app/vllm_server.py: subprocess.Popen(command)).
    "vllm_server.py": f"""\
import subprocess
from app.config import VLLM_MODEL

def start_vllm_server(model: str = VLLM_MODEL):
    command = [
        "python", "-m", "vllm.entrypoints.api_server",
        "--model", model,
        "--port", "8001", "{F}",
    ]
    subprocess.Popen(command)
""",
}


def test_the_demo_api_server_is_found_in_every_form(tmp_path: Path) -> None:
    for name, text in LEGACY.items():
        path = tmp_path / name.replace(".", "_") / name
        path.parent.mkdir()
        path.write_text(text, encoding="utf-8")
        found = read_input_set([path])
        assert [line for _, line in removed_at(found)] == [line_of(text, F)], name
        (invocation,) = found.invocations
        assert LEGACY_API_SERVER_NOTE in invocation.notes, name


def test_a_module_named_like_the_demo_server_is_not_it(tmp_path: Path) -> None:
    text = "python3 -m vllm.entrypoints.api_server_multi --modeltype chat --port 8000\n"
    assert removed_in_text(tmp_path, "run.sh", text + F + "\n") == []


# https://github.com/wagerc97/gpt-oss-alignment/blob/main/vllm.sh: interpreter options
# (`python -u`) before `-m`, over tab-indented continuation lines.
def test_interpreter_options_before_the_module(tmp_path: Path) -> None:
    text = f"python -u \\\n\t-m vllm.entrypoints.openai.api_server \\\n\t--port 8010 \\\n\t{F}\n"
    assert removed_in_text(tmp_path, "vllm.sh", text) == [("vllm.sh", 4)]
    other = f"python -X dev -W ignore -OO -m vllm.entrypoints.openai.api_server {F}\n"
    assert removed_in_text(tmp_path, "dev.sh", other) == [("dev.sh", 1)]
    # an option python does not have: not an interpreter call
    assert removed_in_text(tmp_path, "no.sh", f"python --m vllm.entrypoints.api_server {F}\n") == []


# -- VS Code configurations (JSON with comments) ------------------------------------------------

# VS Code's launch.json as its editor writes it: `//` comments and trailing commas
# (https://code.visualstudio.com/docs/python/debugging#_module, "module" + "args").
_LAUNCH = f"""\
{{
    // Use IntelliSense to learn about possible attributes.
    // For more information, visit: https://go.microsoft.com/fwlink/?linkid=830387
    "version": "0.2.0",
    "configurations": [
        {{
            "name": "vLLM server",
            "type": "debugpy",
            "request": "launch",
            "module": "vllm.entrypoints.openai.api_server", /* the OpenAI server */
            "env": {{"CUDA_VISIBLE_DEVICES": "0"}},
            "args": [
                "--model", "org/model-0.5b",
                "{F}",
            ],
        }},
    ]
}}
"""


def test_a_launch_json_with_comments_is_read_and_walked(tmp_path: Path) -> None:
    path = tmp_path / ".vscode" / "launch.json"
    assert removed_in_text(tmp_path, ".vscode/launch.json", _LAUNCH) == [
        ("launch.json", line_of(_LAUNCH, F))
    ]
    (invocation,) = read_input_set([tmp_path]).invocations  # .vscode is walked
    assert invocation.file == str(path)
    assert {e.name: e.value for e in invocation.env} == {"CUDA_VISIBLE_DEVICES": "0"}


# -- where the release is written ---------------------------------------------------------------


# https://github.com/DeEvade/ia150x-simpilot/blob/main/modal/app.py: the Modal image's
# `.pip_install("vllm==0.7.2", ...)` is the release the app's `vllm serve` runs.
def _modal_app(version: str) -> str:
    return f"""\
import modal

vllm_image = (
    modal.Image.debian_slim(python_version="3.12")
    .pip_install(
        "vllm=={version}",
        "huggingface_hub[hf_transfer]==0.26.2",
    )
    .env({{"HF_HUB_ENABLE_HF_TRANSFER": "1"}})
)
app = modal.App("nlu-vllm")


@app.function(image=vllm_image, gpu="L4:1")
@modal.web_server(port=8000)
def serve():
    import subprocess

    cmd = ["vllm", "serve", "org/model-7b", "--port", "8000", "{F}"]
    subprocess.Popen(" ".join(cmd), shell=True)
"""


def test_a_package_list_pin_names_the_release(tmp_path: Path, kvtool_cli: Any) -> None:
    version = _still_has(REMOVED)
    app = tmp_path / "app.py"
    app.write_text(_modal_app(version), encoding="utf-8")
    report = _audit(kvtool_cli, str(app))
    target = report["invocations"][0]["target"]
    assert (target["vllm_version"], target["source"]) == (version, "pip")
    assert target["origin"] == f"package list vllm=={version} at {app}:6"
    assert not _removed_reported(report)
    # A Truss/BentoML-style YAML package list says it the same way.
    listed = claims_in_text(f"requirements:\n  - vllm=={version}  # serve\n  - hf\n", "c.yaml")
    assert [(c.version, c.source) for c in listed] == [(version, "pip")]


def test_what_only_looks_like_a_listed_pin_is_not_one() -> None:
    for text in (
        '.pip_install("vllm>=0.8")\n',  # a range
        '.pip_install("vllm-ascend==0.9.1")\n',  # another project
        'print("pinning vllm==0.9.1 is advised")\n',  # prose inside a string
        "  - name: vllm==0.9.1 test\n",  # a list item that says more
    ):
        assert claims_in_text(text, "app.py") == (), text
    # A pip command's own quoted pin is read once, as the install.
    (once,) = claims_in_text('RUN pip install "vllm==0.9.1"\n', "Dockerfile")
    assert once.origin.startswith("pip install")


# Compose passes `build: args:` to the Dockerfile's ARG
# (https://docs.docker.com/reference/compose-file/build/#args), interpolated from the
# `.env` beside it (https://docs.docker.com/compose/how-tos/environment-variables/variable-interpolation/).
def _built_service(directory: Path, arg_default: str, compose_arg: str) -> Path:
    directory.mkdir()
    (directory / "Dockerfile").write_text(
        f"FROM nvidia/cuda:12.4.1-runtime-ubuntu22.04\nARG VLLM_VERSION={arg_default}\n"
        "RUN pip install vllm==${VLLM_VERSION}\n",
        encoding="utf-8",
    )
    compose = directory / "compose.yaml"
    compose.write_text(
        "services:\n  llm:\n    build:\n      context: .\n      args:\n"
        f"        VLLM_VERSION: {compose_arg}\n"
        f'    command: ["vllm", "serve", "org/model-7b", "{F}"]\n',
        encoding="utf-8",
    )
    return compose


def test_compose_build_args_replace_the_dockerfiles_arg_default(
    tmp_path: Path, kvtool_cli: Any
) -> None:
    old, gone = _still_has(REMOVED), str(release_index().flags[REMOVED].gone_at)
    compose = _built_service(tmp_path / "dotenv", gone, "${VLLM_VERSION:-" + gone + "}")
    (compose.parent / ".env").write_text(f"VLLM_VERSION={old}\n", encoding="utf-8")
    report = _audit(kvtool_cli, str(compose))
    target = report["invocations"][0]["target"]
    assert (target["vllm_version"], target["source"]) == (old, "build")
    assert f"build arg VLLM_VERSION={old}" in target["origin"]
    assert not _removed_reported(report)
    # Without a .env, the `:-` default is the build arg: the flag is gone there.
    defaulted = _built_service(tmp_path / "default", old, "${VLLM_VERSION:-" + gone + "}")
    assert _removed_reported(_audit(kvtool_cli, str(defaulted)))
    # A literal build arg over the Dockerfile's default.
    literal = _built_service(tmp_path / "literal", gone, old)
    assert not _removed_reported(_audit(kvtool_cli, str(literal)))


# Clarifai's vLLM runner (clarifai runners model.py): `PYTHON_EXEC = sys.executable`,
# then `[PYTHON_EXEC, '-m', 'vllm.entrypoints.openai.api_server', ...]`.
def test_a_constant_bound_to_the_interpreter_heads_the_list(tmp_path: Path) -> None:
    text = (
        "import sys\n\nPYTHON_EXEC = sys.executable\n\n\ndef serve(checkpoints):\n"
        "    cmds = [\n        PYTHON_EXEC,\n        '-m',\n"
        "        'vllm.entrypoints.openai.api_server',\n        '--model',\n"
        f"        checkpoints,\n        '{F}',\n    ]\n    return cmds\n"
    )
    assert removed_in_text(tmp_path, "model.py", text) == [("model.py", line_of(text, F))]


def test_pins_in_inline_lists_and_key_lines() -> None:
    version = _still_has(REMOVED)
    project = f'[project]\nname = "svc"\ndependencies = ["vllm=={version}", "fastapi"]\n'
    assert [(c.version, c.source) for c in claims_in_text(project, "pyproject.toml")] == [
        (version, "requirement")
    ]
    # tox's `deps =` (https://tox.wiki/en/latest/config.html#deps), one line or continued
    one_line, continued = f"deps = vllm=={version}\n", f"deps =\n    vllm=={version}\n"
    for tox in (f"[testenv]\n{one_line}", f"[testenv]\n{continued}"):
        assert [c.version for c in claims_in_text(tox, "tox.ini")] == [version], tox


# Compose interpolates the image too: `image: vllm/vllm-openai:${VLLM_TAG:-v0.9.1}` with
# the tag from the `.env` beside the file, else the default written after `:-`.
def test_a_compose_image_tag_written_as_a_variable(tmp_path: Path, kvtool_cli: Any) -> None:
    old, gone = _still_has(REMOVED), str(release_index().flags[REMOVED].gone_at)
    compose = tmp_path / "docker-compose.yml"
    compose.write_text(
        "services:\n  vllm:\n    image: vllm/vllm-openai:${VLLM_TAG:-v" + gone + "}\n"
        f"    command: --model org/model-7b {F}\n",
        encoding="utf-8",
    )
    defaulted = _audit(kvtool_cli, str(compose))
    target = defaulted["invocations"][0]["target"]
    assert (target["vllm_version"], target["source"]) == (gone, "image")
    assert "VLLM_TAG default" in target["origin"] and _removed_reported(defaulted)
    other = tmp_path / "dotenv"
    other.mkdir()
    (other / "docker-compose.yml").write_text(compose.read_text(), encoding="utf-8")
    (other / ".env").write_text(f"VLLM_TAG=v{old}\n", encoding="utf-8")
    from_env = _audit(kvtool_cli, str(other / "docker-compose.yml"))
    assert from_env["invocations"][0]["target"]["vllm_version"] == old
    assert not _removed_reported(from_env)


# https://github.com/Tandemn-Labs/tandemn-tuna/blob/main/tuna/templates/baseten_config.yaml.tpl:
# a Truss config.yaml template whose start_command is Python-formatted (`{max_model_len}`).
def test_a_format_field_is_a_runtime_value_not_a_bad_value(tmp_path: Path) -> None:
    text = (
        "model_name: {service_name}\nbase_image:\n  image: vllm/vllm-openai:v{vllm_version}\n"
        'docker_server:\n  start_command: >-\n    bash -c "truss-transfer-cli &&\n'
        "    vllm serve {model}\n    --max-model-len {max_model_len}\n"
        f'    --tensor-parallel-size {{tp_size}}\n    {F}"\n  server_port: 8000\n'
    )
    path = tmp_path / "baseten_config.yaml.tpl"
    path.write_text(text, encoding="utf-8")
    found = read_input_set([path])
    assert [line for _, line in removed_at(found)] == [line_of(text, F)]
    (invocation,) = found.invocations
    words = [t.text for t in invocation.tokens]
    assert words[:3] == ["${model}", "--max-model-len", "${max_model_len}"]
    # a shell variable and a brace expansion are not format fields
    script = f"vllm serve m --served-model-name {{a,b}} --port ${{PORT}} {F}\n"
    assert removed_in_text(tmp_path, "notes.txt", script) == [("notes.txt", 1)]


# A compose command that takes its values from the project's `.env`
# (`command: --model ${MODEL} --swap-space ${SWAP}`): compose substitutes them before the
# container starts, so the flag's value is checked, at the line it is written.
def test_compose_command_variables_from_the_project_env(tmp_path: Path) -> None:
    text = (
        "services:\n  vllm:\n    image: vllm/vllm-openai:latest\n"
        "    command: --model ${MODEL} --max-model-len ${MAX_LEN:-4096}\n"
        f"      {F} ${{KV_SCALES}}\n"
    )
    (tmp_path / ".env").write_text("MODEL=org/model-7b\nKV_SCALES=true\n", encoding="utf-8")
    path = tmp_path / "docker-compose.yml"
    path.write_text(text, encoding="utf-8")
    found = read_input_set([path])
    (invocation,) = found.invocations
    assert [t.text for t in invocation.tokens] == [
        "--model", "org/model-7b", "--max-model-len", "4096", F, "true"
    ]  # fmt: skip
    assert [line for _, line in removed_at(found)] == [line_of(text, F)]
    assert any(".env: KV_SCALES, MODEL" in note for note in invocation.notes)
