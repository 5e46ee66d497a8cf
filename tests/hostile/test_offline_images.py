"""inspect-image on hostile offline inputs: a symlink loop inside an OCI layout and a
deeply nested manifest are one line and exit 2, never a traceback."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path
from typing import Any

DIGEST = "a" * 64


def _one_line_refusal(result: Any, needle: str) -> None:
    assert result.exit_code == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr and needle in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_a_symlink_loop_in_an_oci_layout(kvtool_cli: Any, tmp_path: Path) -> None:
    # The shape of an OCI image layout (opencontainers/image-spec, image-layout.md):
    # oci-layout, index.json naming a manifest blob, blobs/sha256/<hex>.
    layout = tmp_path / "layout"
    blobs = layout / "blobs" / "sha256"
    blobs.mkdir(parents=True)
    (layout / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    (layout / "index.json").write_text(
        '{"schemaVersion": 2, "manifests": [{"mediaType": '
        f'"application/vnd.oci.image.manifest.v1+json", "digest": "sha256:{DIGEST}", '
        '"size": 10}]}'
    )
    (blobs / DIGEST).symlink_to(DIGEST)
    _one_line_refusal(kvtool_cli("inspect-image", str(layout)), "symlink loop")


def test_a_deeply_nested_docker_manifest(kvtool_cli: Any, tmp_path: Path) -> None:
    archive = tmp_path / "image.tar"
    body = b"[" * 100_000 + b"]" * 100_000
    with tarfile.open(archive, "w") as tar:
        info = tarfile.TarInfo("manifest.json")
        info.size = len(body)
        tar.addfile(info, io.BytesIO(body))
    _one_line_refusal(kvtool_cli("inspect-image", str(archive)), "nesting_depth")
