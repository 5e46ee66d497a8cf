"""inspect-image on offline inputs: docker save (legacy, 25+), OCI layout, OCI archive."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path
from typing import Any

import pytest

from tests.image.images import Image, digest_of, docker_save, oci_layout, tar_directory

REPO_TAG = "docker.io/vllm/vllm-openai:v0.32.0"


def inspect_json(kvtool_cli: Any, *args: str) -> tuple[int, dict[str, Any], str]:
    result = kvtool_cli("inspect-image", *args, "--output-format", "json")
    return result.exit_code, json.loads(result.stdout) if result.stdout else {}, result.stderr


@pytest.mark.parametrize("layout", ["legacy", "25+"])
def test_docker_save(tmp_path: Path, kvtool_cli: Any, layout: str) -> None:
    archive = tmp_path / "image.tar"
    image = Image(style="classic", kv=True)
    docker_save(archive, image, REPO_TAG, layout)  # type: ignore[arg-type]
    code, report, _ = inspect_json(kvtool_cli, str(archive))
    assert code == 0
    assert report["image"]["source"] == "docker-archive"
    assert report["image"]["config_digest"] == digest_of(image.config())
    assert report["image"]["vllm_version"] == "0.32.0"  # from the RepoTag
    assert report["image"]["build_flag"]["value"] == "true"


def test_docker_save_ignores_platform_but_warns(tmp_path: Path, kvtool_cli: Any) -> None:
    archive = tmp_path / "image.tar"
    docker_save(archive, Image(), REPO_TAG, "legacy")
    _, report, _ = inspect_json(kvtool_cli, str(archive), "--platform", "linux/arm64")
    assert report["image"]["config_platform"] == "linux/amd64"
    assert any("single-platform input" in w for w in report["image"]["warnings"])


def test_oci_layout_with_nested_index_picks_the_platform(tmp_path: Path, kvtool_cli: Any) -> None:
    layout = tmp_path / "layout"
    oci_layout(layout, [Image(arch="amd64", kv=True), Image(arch="arm64", kv=False)], "v0.32.0")
    code, amd, _ = inspect_json(kvtool_cli, str(layout))
    assert code == 0 and amd["image"]["source"] == "oci-layout"
    assert amd["image"]["available_platforms"] == ["linux/amd64", "linux/arm64"]
    code, arm, _ = inspect_json(kvtool_cli, str(layout), "--platform", "linux/arm64")
    assert code == 1 and arm["image"]["build_flag"]["value"] == "false"


def test_oci_layout_picks_the_image_by_ref_name(tmp_path: Path, kvtool_cli: Any) -> None:
    layout = tmp_path / "layout"
    oci_layout(layout, [Image()], "v0.32.0", nested=False)
    code, _, _ = inspect_json(kvtool_cli, str(layout), "--ref", "v0.32.0")
    assert code == 0
    result = kvtool_cli("inspect-image", str(layout), "--ref", "v9.9.9")
    assert result.exit_code == 2
    assert "no image named 'v9.9.9'; names: v0.32.0" in result.stderr


def test_oci_archive(tmp_path: Path, kvtool_cli: Any) -> None:
    layout = tmp_path / "layout"
    oci_layout(layout, [Image(arch="amd64", style="buildah", kv=True)], "v0.32.0")
    archive = tmp_path / "image-oci.tar"
    tar_directory(layout, archive)
    code, report, _ = inspect_json(kvtool_cli, str(archive))
    assert code == 0
    assert report["image"]["source"] == "oci-archive"
    assert report["image"]["build_flag"]["value"] == "true"


# -- malicious and broken inputs ---------------------------------------------------------


def _tar(path: Path, members: dict[str, bytes], links: dict[str, str] | None = None) -> None:
    with tarfile.open(path, "w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type = tarfile.SYMTYPE
            info.linkname = target
            tar.addfile(info)


def _manifest_json(config: str) -> bytes:
    return json.dumps([{"Config": config, "RepoTags": [REPO_TAG], "Layers": []}]).encode()


def _refused(kvtool_cli: Any, path: Path, fragment: str) -> None:
    result = kvtool_cli("inspect-image", str(path))
    assert result.exit_code == 2
    assert fragment in result.stderr
    assert "Traceback" not in result.stderr


def test_member_escaping_the_archive_is_refused(tmp_path: Path, kvtool_cli: Any) -> None:
    archive = tmp_path / "evil.tar"
    _tar(archive, {"manifest.json": _manifest_json("c.json"), "../../etc/cron.d/x": b"boom"})
    _refused(kvtool_cli, archive, "points outside the archive")


def test_config_path_traversal_is_refused(tmp_path: Path, kvtool_cli: Any) -> None:
    archive = tmp_path / "evil.tar"
    _tar(archive, {"manifest.json": _manifest_json("../../../etc/passwd")})
    _refused(kvtool_cli, archive, "points outside the archive")


def test_symlinked_config_is_refused(tmp_path: Path, kvtool_cli: Any) -> None:
    archive = tmp_path / "evil.tar"
    _tar(archive, {"manifest.json": _manifest_json("c.json")}, links={"c.json": "/etc/passwd"})
    _refused(kvtool_cli, archive, "not a regular file")


def test_huge_config_is_refused(tmp_path: Path, kvtool_cli: Any) -> None:
    archive = tmp_path / "huge.tar"
    docker_save(archive, Image(config_padding=2 * 1024 * 1024), REPO_TAG, "legacy")
    result = kvtool_cli("inspect-image", str(archive), "--max-config-bytes", str(1024 * 1024))
    assert result.exit_code == 2
    assert "over the 1048576-byte cap" in result.stderr


def test_config_not_matching_its_digest_is_refused(tmp_path: Path, kvtool_cli: Any) -> None:
    archive = tmp_path / "tampered.tar"
    name = "blobs/sha256/" + "0" * 64
    _tar(archive, {"manifest.json": _manifest_json(name), name: Image().config()})
    _refused(kvtool_cli, archive, "does not match its digest")


def test_malformed_manifest_json_is_refused(tmp_path: Path, kvtool_cli: Any) -> None:
    archive = tmp_path / "bad.tar"
    _tar(archive, {"manifest.json": b"[{not json"})
    _refused(kvtool_cli, archive, "manifest.json is not valid JSON")


def test_indexes_nested_too_deep_are_refused_as_a_loop(tmp_path: Path, kvtool_cli: Any) -> None:
    layout = tmp_path / "layout"
    oci_layout(layout, [Image()], "v0.32.0", nested=False)
    blobs = layout / "blobs" / "sha256"
    child = json.loads((layout / "index.json").read_text())["manifests"][0]
    for _ in range(6):  # each level a distinct, correctly hashed index around the last
        body = json.dumps({"schemaVersion": 2, "manifests": [child]}).encode()
        (blobs / digest_of(body).split(":")[1]).write_bytes(body)
        child = {
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "digest": digest_of(body),
            "size": len(body),
        }
    (layout / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [child]}))
    result = kvtool_cli("inspect-image", str(layout))
    assert result.exit_code == 2
    assert "nested deeper than" in result.stderr


def test_not_an_image_archive(tmp_path: Path, kvtool_cli: Any) -> None:
    archive = tmp_path / "other.tar"
    _tar(archive, {"README": b"hello"})
    _refused(kvtool_cli, archive, "neither a docker save archive")


def test_a_file_that_is_no_tar_is_a_one_line_error(tmp_path: Path, kvtool_cli: Any) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("not an image\n")
    result = kvtool_cli("inspect-image", str(text))
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        f"kvtool: error: {text}: not a tar archive (plain, gzip, bzip2 or xz), so neither a "
        "docker save nor an OCI archive"
    )


def test_missing_archive_path_is_named_not_parsed_as_a_reference(
    tmp_path: Path, kvtool_cli: Any
) -> None:
    missing = tmp_path / "image.tar"
    result = kvtool_cli("inspect-image", str(missing))
    assert result.exit_code == 2
    assert result.stderr.strip() == f"kvtool: error: {missing}: no such file or directory"
