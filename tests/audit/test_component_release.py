"""The releases of NIXL, Dynamo, llm-d, ... learned from the input
(kvtool.audit.component_release), and the known-bug findings that rest on them.

Shapes: `pip install nixl==X` in a Dockerfile RUN or a script is how Ray pinned NIXL next
to vLLM (https://github.com/ray-project/ray/pull/57201); `nixl-cu12` is the CUDA-12 build
an image installs (https://github.com/kaito-project/kaito/pull/2050); Dynamo's runtime
image tag carries its release (`nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.1.0rc1-cuda13`,
https://github.com/ai-dynamo/nixl/issues/1614); AIBrix's image tag names the NIXL it
bundles (`aibrix/vllm-openai:v0.9.2-cu128-nixl-v0.4.1-lmcache-0.3.1.post1`,
https://github.com/vllm-project/aibrix/blob/41821a1a6f95ad4eaf7bc56828b9120eb629692b/samples/disaggregation/vllm/1p1d.yaml).
production-stack's chart is `vllm-stack` with its release as chart version
(https://github.com/vllm-project/production-stack/blob/0149b191b99884ded6c37b1d13a8c7a6a4f678b6/helm/Chart.yaml),
installed as `helm install vllm vllm/vllm-stack`.
The NIXL facts are KB-NIXL-57201's (rules/bugs/nixl.toml), whose fixed release the test
reads from the record rather than restating it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from packaging.version import Version

from kvtool.audit.component_release import (
    ComponentRelease,
    from_distributions,
    from_image,
    pins_in_text,
    resolve,
)
from kvtool.bugdb import record

NIXL = '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'
NIXL_BUG = "KB-NIXL-57201"


def _fixed_nixl() -> str:
    bug = record(NIXL_BUG)
    assert bug is not None and bug.fixed is not None
    return bug.fixed


def _before(release: str) -> str:
    """A NIXL release before ``release`` (its minor one lower)."""
    major, minor, _ = Version(release).release
    return f"{major}.{minor - 1}.0" if minor else f"{major - 1}.9.0"


def test_a_pip_pin_names_the_release_and_where() -> None:
    text = "FROM vllm/vllm-openai:v0.11.0\nRUN pip install --no-cache-dir \\\n  nixl-cu12==0.4.1\n"
    (pin,) = pins_in_text(text, "Dockerfile")
    assert (pin.component, pin.version, pin.file) == ("nixl", "0.4.1", "Dockerfile")
    assert pin.origin == "pip install nixl==0.4.1 at Dockerfile:2"


def test_requirements_lines_and_several_components() -> None:
    text = "vllm==0.11.0\nnixl==0.6.0  # P/D\nai-dynamo==0.6.1\n"
    found = {p.component: p.version for p in pins_in_text(text, "requirements.txt")}
    assert found == {"nixl": "0.6.0", "dynamo": "0.6.1"}


def test_a_name_that_only_starts_like_the_package_is_no_pin() -> None:
    assert pins_in_text("RUN pip install nixlbench==0.4.1\n", "Dockerfile") == ()


CHART = (
    "apiVersion: v2\nname: vllm-stack\ndescription: The stack\ntype: application\nversion: 0.1.9\n"
)
UMBRELLA = (
    "apiVersion: v2\nname: platform\nversion: 1.0.0\ndependencies:\n"
    "  - name: redis\n    version: 17.0.0\n"
    "  - name: vllm-stack\n    repository: https://vllm-project.github.io/production-stack\n"
    '    version: "0.1.7"\n'
)


@pytest.mark.parametrize(
    ("text", "file", "version", "line"),
    [
        (CHART, "helm/Chart.yaml", "0.1.9", 5),
        (UMBRELLA, "Chart.yaml", "0.1.7", 9),
        (
            "helm upgrade --install vllm vllm/vllm-stack --version 0.1.8 -f v.yaml\n",
            "up.sh",
            "0.1.8",
            1,
        ),
    ],
)
def test_a_cited_chart_version_names_the_release(
    text: str, file: str, version: str, line: int
) -> None:
    (pin,) = pins_in_text(text, file)
    assert (pin.component, pin.version) == ("production-stack", version)
    assert pin.origin.endswith(f"{version} at {file}:{line}")


@pytest.mark.parametrize(
    ("text", "file"),
    [
        ("helm install vllm vllm/vllm-stack -f values.yaml\n", "up.sh"),  # no version
        (UMBRELLA.replace('"0.1.7"', '">=0.1.0"'), "Chart.yaml"),  # a range, not a release
        (CHART, "values.yaml"),  # the same keys outside a Chart.yaml
        (UMBRELLA.replace("vllm-stack", "vllm-stack-extras"), "Chart.yaml"),
    ],
)
def test_other_chart_text_names_no_release(text: str, file: str) -> None:
    assert pins_in_text(text, file) == ()


@pytest.mark.parametrize(
    ("image", "component", "version"),
    [
        ("nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.1.0rc1-cuda13", "dynamo", "1.1.0rc1"),
        ("ghcr.io/llm-d/llm-d-cuda:v0.3.0", "llm-d", "0.3.0"),
        ("kserve/huggingfaceserver:v0.15.1-gpu", "kserve", "0.15.1"),
        ("aibrix/vllm-openai:v0.9.2-cu128-nixl-v0.4.1-lmcache-0.3.1.post1", "nixl", "0.4.1"),
    ],
)
def test_a_cited_image_tag_names_the_release(image: str, component: str, version: str) -> None:
    found = from_image(image, component)
    assert found is not None and found.version == version


@pytest.mark.parametrize(
    ("image", "component"),
    [
        ("ghcr.io/llm-d/llm-d-cuda:latest", "llm-d"),  # no release in the tag
        ("vllm/vllm-openai:v0.11.0", "nixl"),  # a vLLM release, not NIXL's
        ("nvcr.io/nvidia/ai-dynamo/vllm-runtime:0.6.1", "nixl"),  # Dynamo's, not NIXL's
    ],
)
def test_other_tags_name_no_release(image: str, component: str) -> None:
    assert from_image(image, component) is None


def test_an_inspect_image_distribution_counts_with_its_cuda_flavour() -> None:
    found = from_distributions({"nixl-cu12": "0.6.0", "torch": "2.8.0"}, "nixl")
    assert found is not None and found.version == "0.6.0"
    assert found.origin == "nixl-cu12 0.6.0 installed in the image"
    assert from_distributions({"torch": "2.8.0"}, "nixl") is None


def test_order_own_pin_then_image_then_agreeing_pins() -> None:
    own = ComponentRelease("nixl", "0.4.1", "pip install nixl==0.4.1 at a.sh:2", "a.sh")
    other = ComponentRelease("nixl", "0.6.0", "requirement nixl==0.6.0 at r.txt:1", "r.txt")
    tagged = "aibrix/vllm-openai:v0.9.2-cu128-nixl-v0.5.0-lmcache-0.3.1.post1"

    def resolved(file: str | None, images: list[str], installed: dict[str, str]) -> str | None:
        found = resolve(
            "nixl",
            explicit=None,
            explicit_origin="--component-version",
            file=file,
            images=images,
            installed=installed,
            pins=[own, other],
        )
        return found.version if found is not None else None

    assert resolved("a.sh", [tagged], {"nixl": "0.7.0"}) == "0.4.1"  # the engine's own file
    assert resolved("b.sh", [tagged], {"nixl": "0.7.0"}) == "0.7.0"  # what the image holds
    assert resolved("b.sh", [tagged], {}) == "0.5.0"  # the image tag
    assert resolved("b.sh", [], {}) is None  # pins elsewhere disagree


def _audit(kvtool_cli: Any, path: Path, *args: str) -> list[dict[str, Any]]:
    result = kvtool_cli(
        "audit", str(path), "--vllm-version", "0.11.0", "--select", "SC002",
        "--output-format", "json", *args,
    )  # fmt: skip
    assert result.exit_code in (0, 1), result.stderr
    return [f for f in json.loads(result.stdout)["findings"] if f["evidence"]["record"] == NIXL_BUG]


def _pinned(nixl: str) -> str:
    serve = f"vllm serve Qwen/Qwen3-8B --kv-transfer-config '{NIXL}'"
    return f"#!/bin/sh\npip install nixl=={nixl}\n{serve}\n"


def test_the_nixl_record_follows_the_pinned_release(kvtool_cli: Any, tmp_path: Path) -> None:
    script = tmp_path / "serve.sh"
    old = _before(_fixed_nixl())
    script.write_text(_pinned(old))
    (finding,) = _audit(kvtool_cli, script)
    assert finding["severity"] == "error" and finding["evidence"]["release"] == old
    assert f"pip install nixl=={old} at {script}:2" in finding["message"]
    script.write_text(_pinned(_fixed_nixl()))
    assert _audit(kvtool_cli, script) == []


def test_an_unknown_release_leaves_a_fixed_bug_out(kvtool_cli: Any, tmp_path: Path) -> None:
    script = tmp_path / "serve.sh"
    script.write_text(f"#!/bin/sh\nvllm serve Qwen/Qwen3-8B --kv-transfer-config '{NIXL}'\n")
    assert _audit(kvtool_cli, script) == []  # NIXL's release is not known: no assumption
    found = _audit(kvtool_cli, script, "--component-version", f"nixl={_before(_fixed_nixl())}")
    assert found and "--component-version" in found[0]["message"]


def test_a_bad_component_version_is_one_line(kvtool_cli: Any, tmp_path: Path) -> None:
    script = tmp_path / "serve.sh"
    script.write_text(f"#!/bin/sh\nvllm serve Qwen/Qwen3-8B --kv-transfer-config '{NIXL}'\n")
    for value, words in (
        ("nixl=abc", "is not a nixl version"),
        ("flux=1.0.0", "unknown component"),
    ):
        result = kvtool_cli("audit", str(script), "--component-version", value)
        assert result.exit_code == 2 and words in result.stderr
        assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_an_inspect_image_report_gives_the_release(kvtool_cli: Any, tmp_path: Path) -> None:
    """`kvtool audit --image-verdicts REPORT`: the NIXL build the probe found installed
    (`nixl-cu12`, as the probe names distributions) decides the record."""
    from kvtool.image.model import InspectionReport, ProbeReport, StepOutcome

    old = _before(_fixed_nixl())
    report = InspectionReport(
        build_flag_step=StepOutcome(status="ran"),
        runtime_step=StepOutcome(status="ran"),
        probe=ProbeReport(python="3.12.3", imports={}, distributions={"nixl-cu12": old}),
        verdicts=[],
        exit_code=0,
    )
    verdicts = tmp_path / "image.json"
    verdicts.write_text(report.model_dump_json())
    script = tmp_path / "serve.sh"
    script.write_text(f"#!/bin/sh\nvllm serve Qwen/Qwen3-8B --kv-transfer-config '{NIXL}'\n")
    (finding,) = _audit(kvtool_cli, script, "--image-verdicts", str(verdicts))
    assert f"nixl-cu12 {old} installed in the image" in finding["message"]


def test_the_settings_file_names_releases_too(
    kvtool_cli: Any, tmp_path: Path, monkeypatch: Any
) -> None:
    script = tmp_path / "serve.sh"
    script.write_text(f"#!/bin/sh\nvllm serve Qwen/Qwen3-8B --kv-transfer-config '{NIXL}'\n")
    monkeypatch.chdir(tmp_path)
    settings = tmp_path / "kvtool.toml"
    settings.write_text(f'component-versions = {{ nixl = "{_before(_fixed_nixl())}" }}\n')
    (finding,) = _audit(kvtool_cli, script)
    assert "kvtool.toml: component-versions" in finding["message"]
    settings.write_text('component-versions = { flux = "1.0.0" }\n')
    result = kvtool_cli("audit", str(script))
    assert result.exit_code == 2 and "unknown component 'flux'" in result.stderr
