"""The LMCache release learned from the input (kvtool.audit.lmcache_release).

Shapes: LMCache's release workflow tags lmcache/vllm-openai with the release it just
published (https://github.com/LMCache/LMCache/blob/049f1036fb0748796ece99b3a5e0917e6a7b9414/.github/workflows/publish.yml,
job publish-image: `--tag lmcache/vllm-openai:$LATEST_TAG`, plus `-lightweight` and
`-cu129` flavours); `pip install lmcache==X` in a Dockerfile RUN or a container's
`sh -c` and a `lmcache==X` requirements line are how deployments pin it
(LMCache's docker/Dockerfile installs `lmcache` with uv pip in the same way).
VG016's facts: LMCache 0.3.7's adapter imports `cdiv` from `vllm.utils`, which vLLM
0.32.0 no longer binds (rules/lmcache/vllm_pairs.json); 0.5.6 starts there.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import msgspec
import pytest

from kvtool import lmcache
from kvtool.audit import lmcache_release
from kvtool.audit.lmcache_release import (
    LmcacheRelease,
    bundled_in,
    from_image,
    is_requirements_name,
    pins_in_text,
    resolve,
)
from kvtool.releases import bundling_pins

V1_CONNECTOR = '{"kv_connector":"LMCacheConnectorV1","kv_role":"kv_both"}'


@pytest.mark.parametrize(
    ("image", "version"),
    [
        ("lmcache/vllm-openai:v0.3.9", "0.3.9"),
        ("docker.io/lmcache/vllm-openai:v0.3.9-cu129", "0.3.9"),
        ("lmcache/vllm-openai:v0.3.10.post1-lightweight", "0.3.10.post1"),
        ("lmcache/vllm-openai:latest", None),
        ("lmcache/vllm-openai:2025-05-27-v1", None),  # a date build names no release
        ("lmcache/vllm-openai", None),
        # vLLM's own image: its tag is vLLM's release, never LMCache's.
        ("vllm/vllm-openai:v0.11.0", None),
    ],
)
def test_only_a_cited_image_tag_names_the_lmcache_release(image: str, version: str | None) -> None:
    found = from_image(image)
    assert (found.version if found else None) == version
    if found is not None:
        assert found.origin.startswith("image tag lmcache/vllm-openai:v")


def test_pip_install_pins_are_read_with_their_line() -> None:
    dockerfile = (
        "FROM vllm/vllm-openai:v0.11.0\n"
        "RUN pip install --no-cache-dir \\\n"
        '    "lmcache==0.3.9" nixl\n'
        'CMD ["vllm", "serve", "m"]\n'
    )
    (pin,) = pins_in_text(dockerfile, "Dockerfile")
    assert pin == LmcacheRelease(
        "0.3.9", "pip install lmcache==0.3.9 at Dockerfile:2", "Dockerfile"
    )
    shell = 'args: ["uv pip install lmcache==0.3.10.post1 && vllm serve m"]\n'
    assert [p.version for p in pins_in_text(shell, "deploy.yaml")] == ["0.3.10.post1"]


@pytest.mark.parametrize(
    "text",
    [
        "RUN pip install lmcache\n",  # unpinned: whatever PyPI had that day
        "RUN pip install 'lmcache>=0.3.9'\n",  # a range names no release
        "RUN pip install lmcache==${LMCACHE_VERSION}\n",  # a build argument, not a literal
        "RUN pip install torch && echo lmcache==0.3.9\n",  # not an install of lmcache
        "RUN pip install my-lmcache==0.3.9\n",
    ],
)
def test_what_does_not_pin_a_release_is_not_read_as_one(text: str) -> None:
    assert pins_in_text(text, "Dockerfile") == ()


def test_requirements_lines_pin_only_in_requirements_files() -> None:
    text = "torch==2.8.0\nlmcache==0.3.8  # the tested release\nlmcache-extras==1.0.0\n"
    (pin,) = pins_in_text(text, "deploy/requirements.txt")
    assert pin.version == "0.3.8" and pin.origin.endswith("requirements.txt:2")
    assert is_requirements_name("requirements/common.txt")
    assert not is_requirements_name("notes.txt")
    assert pins_in_text(text, "notes.txt") == ()


def _pin(version: str, file: str) -> LmcacheRelease:
    return LmcacheRelease(version, f"pip install lmcache=={version} at {file}:1", file)


def test_the_order_of_the_sources() -> None:
    image = "lmcache/vllm-openai:v0.3.9"
    flag = LmcacheRelease("0.5.6", "--lmcache-version")
    own, other = _pin("0.3.10", "run.sh"), _pin("0.3.8", "Dockerfile")
    # The user's word wins; then the engine's own install, which replaces the image's.
    assert resolve(explicit=flag, file="run.sh", image=image, pins=[own]) == flag
    assert resolve(explicit=None, file="run.sh", image=image, pins=[own, other]) == own
    # The engine's image before a pin elsewhere in the input set.
    found = resolve(explicit=None, file="deploy.yaml", image=image, pins=[other])
    assert found is not None and found.version == "0.3.9"
    assert resolve(explicit=None, file="deploy.yaml", image=None, pins=[other]) == other
    # Pins that disagree name no release.
    both = [other, _pin("0.3.7", "requirements.txt")]
    assert resolve(explicit=None, file="deploy.yaml", image=None, pins=both) is None


def _pod(image: str, command: str) -> str:
    return (
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: engine\nspec:\n  containers:\n"
        f"  - name: vllm\n    image: {image}\n"
        f'    command: ["/bin/sh", "-c"]\n    args: [{json.dumps(command)}]\n'
    )


SERVE = f"vllm serve Qwen/Qwen3-8B --kv-transfer-config '{V1_CONNECTOR}'"


def _vg016(kvtool_cli: Any, *paths: Path) -> list[dict[str, Any]]:
    result = kvtool_cli(
        "audit",
        *map(str, paths),
        "--vllm-version",
        "0.32.0",
        "--select",
        "VG016",
        "--output-format",
        "json",
    )
    report = json.loads(result.stdout)
    findings: list[dict[str, Any]] = report["findings"]
    return findings


def test_an_image_tag_release_fires_vg016_and_names_the_tag(
    kvtool_cli: Any, tmp_path: Path
) -> None:
    pod = tmp_path / "pod.yaml"
    pod.write_text(_pod("lmcache/vllm-openai:v0.3.7", SERVE))
    (finding,) = _vg016(kvtool_cli, pod)
    assert "cdiv" in finding["message"]
    assert "from image tag lmcache/vllm-openai:v0.3.7" in finding["message"]
    pod.write_text(_pod("lmcache/vllm-openai:latest", SERVE))
    assert _vg016(kvtool_cli, pod) == []


def test_a_pip_install_in_the_engines_command_beats_the_image_tag(
    kvtool_cli: Any, tmp_path: Path
) -> None:
    pod = tmp_path / "pod.yaml"
    pod.write_text(_pod("lmcache/vllm-openai:v0.5.6", f"pip install lmcache==0.3.7 && {SERVE}"))
    (finding,) = _vg016(kvtool_cli, pod)
    assert f"from pip install lmcache==0.3.7 at {pod}:" in finding["message"]
    pod.write_text(_pod("lmcache/vllm-openai:v0.3.7", f"pip install lmcache==0.5.6 && {SERVE}"))
    assert _vg016(kvtool_cli, pod) == []


def test_a_requirements_pin_in_the_input_set(kvtool_cli: Any, tmp_path: Path) -> None:
    (tmp_path / "run.sh").write_text(f"#!/bin/sh\n{SERVE}\n")
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("vllm==0.32.0\nlmcache==0.3.7\n")
    (finding,) = _vg016(kvtool_cli, tmp_path)
    assert f"from requirement lmcache==0.3.7 at {requirements}:2" in finding["message"]
    requirements.write_text("vllm==0.32.0\nlmcache==0.5.6\n")
    assert _vg016(kvtool_cli, tmp_path) == []


def test_a_known_lmcache_bug_is_matched_against_the_tagged_release(
    kvtool_cli: Any, tmp_path: Path
) -> None:
    # LMCache#3688 affects 0.4.5-0.5.0 and is guarded in 0.5.1 (KB-LMCACHE-3688).
    pod = tmp_path / "pod.yaml"

    def known_bugs(image: str) -> list[dict[str, Any]]:
        pod.write_text(_pod(image, SERVE))
        result = kvtool_cli("audit", str(pod), "--vllm-version", "0.32.0",
                            "--select", "SC002", "--output-format", "json")
        findings: list[dict[str, Any]] = json.loads(result.stdout)["findings"]
        return findings

    (finding,) = [f for f in known_bugs("lmcache/vllm-openai:v0.5.0")
                  if f["evidence"]["bug"] == "LMCache/LMCache#3688"]
    assert "[LMCache 0.5.0 from image tag lmcache/vllm-openai:v0.5.0]" in finding["message"]
    bugs = [f["evidence"]["bug"] for f in known_bugs("lmcache/vllm-openai:v0.5.1")]
    assert "LMCache/LMCache#3688" not in bugs


# vLLM's own images: rules/curated/bundling.toml rows `where = "image vllm/vllm-openai:vY"`
# record the LMCache release such an image holds (lmcache==X over since/until).
def _image_rows() -> list[tuple[str, str]]:
    """(image, bundled LMCache release) for every image-content row of bundling.toml."""
    return [
        (row.where.removeprefix("image "), row.requirement.removeprefix("=="))
        for row in bundling_pins()
        if row.package == "lmcache" and row.where.startswith("image vllm/vllm-openai:")
    ]


def test_vllms_image_names_the_lmcache_it_bundles() -> None:
    rows = _image_rows()
    assert rows  # the table records at least one image
    for image, version in rows:
        found = bundled_in(image)
        assert found == LmcacheRelease(version, f"LMCache {version} bundled in {image}")
        # Another build of the same release (a CUDA flavour) has its own pins.
        assert bundled_in(f"{image}-cu129") is None
        assert bundled_in(image.replace("vllm/", "lmcache/", 1)) is None
    assert bundled_in("vllm/vllm-openai:latest") is None
    assert bundled_in("vllm/vllm-openai:v0.1.0") is None  # older than every row


def test_the_bundled_release_comes_after_every_source_the_input_shows() -> None:
    image, version = _image_rows()[-1]
    bundled = resolve(explicit=None, file="deploy.yaml", image=image, pins=[])
    assert bundled is not None and bundled.version == version
    flag = LmcacheRelease("0.3.7", "--lmcache-version")
    assert resolve(explicit=flag, file="deploy.yaml", image=image, pins=[]) == flag
    other = _pin("0.3.8", "requirements.txt")
    assert resolve(explicit=None, file="deploy.yaml", image=image, pins=[other]) == other
    # Pins that disagree leave it unknown rather than falling back to the image.
    both = [other, _pin("0.3.7", "Dockerfile")]
    assert resolve(explicit=None, file="deploy.yaml", image=image, pins=both) is None


class PairCase(NamedTuple):
    image: str
    vllm: str
    broken: str
    good: str


@pytest.fixture
def image_bundling_a_broken_lmcache(monkeypatch: pytest.MonkeyPatch) -> Iterator[PairCase]:
    """A bundling row saying a real vLLM image holds an LMCache release that the pair table
    shows cannot start there (the real rows' releases all start, so the row is made here
    from the real row's image and a real pair problem)."""
    image, good = _image_rows()[-1]
    vllm = image.rsplit(":v", 1)[1]
    broken = next(
        p for p in lmcache.vllm_pairs().pairs
        if p.vllm == vllm and p.connector == "LMCacheConnectorV1"
    )  # fmt: skip
    row = next(r for r in bundling_pins() if r.where == f"image {image}")
    rows = (msgspec.structs.replace(row, requirement=f"=={broken.lmcache}"),)
    monkeypatch.setattr(lmcache_release, "bundling_pins", lambda: rows)
    bundled_in.cache_clear()
    yield PairCase(image, vllm, broken.lmcache, good)
    bundled_in.cache_clear()


def test_vg016_fires_on_the_release_the_vllm_image_bundles(
    kvtool_cli: Any, tmp_path: Path, image_bundling_a_broken_lmcache: PairCase
) -> None:
    case = image_bundling_a_broken_lmcache
    pod = tmp_path / "pod.yaml"
    pod.write_text(_pod(case.image, SERVE))
    result = kvtool_cli(
        "audit", str(pod), "--vllm-version", case.vllm, "--select", "VG016",
        "--output-format", "json",
    )  # fmt: skip
    (finding,) = json.loads(result.stdout)["findings"]
    assert (
        f"LMCache {case.broken} (from LMCache {case.broken} bundled in {case.image})"
        in (finding["message"])
    )
    # A pin in the engine's own command replaces what the image holds: quiet.
    pod.write_text(_pod(case.image, f"pip install lmcache=={case.good} && {SERVE}"))
    result = kvtool_cli(
        "audit", str(pod), "--vllm-version", case.vllm, "--select", "VG016",
        "--output-format", "json",
    )  # fmt: skip
    assert json.loads(result.stdout)["findings"] == []
    # So does --lmcache-version.
    pod.write_text(_pod(case.image, SERVE))
    result = kvtool_cli(
        "audit", str(pod), "--vllm-version", case.vllm, "--lmcache-version", case.good,
        "--select", "VG016", "--output-format", "json",
    )  # fmt: skip
    assert json.loads(result.stdout)["findings"] == []


@pytest.mark.parametrize("given", ["x.y", "latest"])
def test_an_lmcache_version_that_is_no_release_is_one_line(
    kvtool_cli: Any, tmp_path: Path, given: str
) -> None:
    script = tmp_path / "serve.sh"
    script.write_text(
        "vllm serve m --kv-transfer-config "
        '\'{"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"}\'\n'
    )
    result = kvtool_cli(
        "audit", "--vllm-version", "0.32.0", "--lmcache-version", given, str(script)
    )
    assert result.exit_code == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip() == (
        f"kvtool: error: --lmcache-version: {given!r} is not an LMCache version"
    )
