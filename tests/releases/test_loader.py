"""Loader and target-release resolution: what `kvtool audit` relies on at start-up."""

from __future__ import annotations

from pathlib import Path

import pytest
from packaging.version import Version

from kvtool.errors import KvtoolError
from kvtool.releases import (
    available_versions,
    connector_gate,
    env_var_gate,
    flag_gate,
    load_release,
    loader,
    resolve_target,
    tier_gate,
    version_from_image,
)
from kvtool.releases.loader import releases_dir


def test_available_versions_sorted_by_release_order_not_text() -> None:
    versions = available_versions()
    assert versions == sorted(versions, key=Version)
    # text order would put 0.10.2 after 0.1x; release order puts 0.9 < 0.10 < 0.11 < 0.100
    assert versions.index("0.10.2") < versions.index("0.11.0") < versions.index("0.33.0")


def test_load_release_accepts_a_leading_v_and_caches() -> None:
    assert load_release("v0.32.0") is load_release("v0.32.0")
    assert load_release("v0.32.0").version == "0.32.0"
    assert load_release("0.32").version == "0.32.0"  # PEP 440: 0.32 == 0.32.0


@pytest.mark.parametrize("bad", ["0.99.0", "0.12.1", "banana"])
def test_load_release_unknown_version_is_a_one_line_kvtool_error(bad: str) -> None:
    with pytest.raises(KvtoolError) as err:
        load_release(bad)
    assert "\n" not in str(err.value)
    assert bad in str(err.value)


def test_index_covers_every_table_and_gate_helpers() -> None:
    from kvtool.releases import release_index

    index = release_index()
    assert list(index.versions) == available_versions()
    assert set(index.wheels) == set(available_versions())
    gate = flag_gate("--no-calculate-kv-scales")
    assert gate is not None and gate.gone_at == "0.28.0"
    assert flag_gate("--not-a-vllm-flag") is None
    assert env_var_gate("VLLM_NIXL_ABORT_REQUEST_TIMEOUT").gone_at == "0.22.0"  # type: ignore[union-attr]
    assert connector_gate("HiSparseConnector").first_seen == "0.30.0"  # type: ignore[union-attr]
    assert tier_gate("obj").first_seen == "0.23.0"  # type: ignore[union-attr]


def test_index_is_compact_json() -> None:
    text = (releases_dir() / "index.json").read_text()
    assert "\n" not in text.rstrip("\n")  # one line, no indentation
    assert '"gone_at":null' not in text  # absent gates are omitted, not spelled out


@pytest.mark.parametrize(
    ("image", "version"),
    [
        ("vllm/vllm-openai:v0.32.0", "0.32.0"),
        ("vllm/vllm-openai:0.31.1-cuda12", "0.31.1"),
        ("registry.local:5000/vllm/vllm-openai:v0.30.0-cu129", "0.30.0"),
        ("vllm/vllm-openai:v0.33.0rc1", "0.33.0rc1"),
        ("vllm/vllm-openai:latest", None),
        ("vllm/vllm-openai", None),
        ("registry.local:5000/vllm/vllm-openai", None),
        ("vllm/vllm-openai@sha256:" + "a" * 64, None),
        ("vllm/vllm-openai:glm51-cu130", None),
    ],
)
def test_version_from_image_tag(image: str, version: str | None) -> None:
    assert version_from_image(image) == version


def test_explicit_version_wins_over_image() -> None:
    target = resolve_target("0.29.0", "vllm/vllm-openai:v0.32.0")
    assert (target.version, target.source, target.warning) == ("0.29.0", "flag", None)


def test_image_tag_used_when_no_flag() -> None:
    target = resolve_target(None, "vllm/vllm-openai:v0.31.0")
    assert (target.version, target.source, target.warning) == ("0.31.0", "image", None)


def test_newest_table_when_nothing_says_and_the_output_says_so() -> None:
    newest = available_versions()[-1]
    target = resolve_target(None, None)
    assert (target.version, target.source) == (newest, "newest")
    assert target.warning is not None and newest in target.warning
    untagged = resolve_target(None, "vllm/vllm-openai:latest")
    assert untagged.source == "newest"
    assert untagged.warning is not None and "vllm/vllm-openai:latest" in untagged.warning


def test_release_newer_than_tables_warns_and_uses_newest() -> None:
    newest = available_versions()[-1]
    target = resolve_target("9.0.0", None)
    assert target.version == newest and target.source == "flag"
    assert target.warning is not None and "newer" in target.warning


def test_untabled_patch_maps_to_nearest_lower_patch_with_warning() -> None:
    target = resolve_target(None, "vllm/vllm-openai:0.31.1-cuda12")
    assert (target.version, target.source) == ("0.31.0", "image")
    assert target.warning is not None and "0.31.0" in target.warning


def test_pre_and_post_releases_use_their_base_release() -> None:
    assert resolve_target("0.33.0rc1", None).version == "0.33.0"
    post = resolve_target("0.11.0.post2", None)
    assert post.version == "0.11.0" and post.warning is not None


@pytest.mark.parametrize("bad", ["0.12.5x", "v"])
def test_not_a_version_is_an_error(bad: str) -> None:
    with pytest.raises(KvtoolError) as err:
        resolve_target(bad, None)
    assert "--vllm-version" in str(err.value)
    assert "\n" not in str(err.value)


# vLLM releases older than the oldest table (0.4.0): 0.3.3 and 0.2.7 are on PyPI.
@pytest.mark.parametrize("old", ["0.3.3", "0.2.7"])
def test_older_than_oldest_uses_the_oldest_table_with_a_warning(old: str) -> None:
    oldest = available_versions()[0]
    assert Version(old) < Version(oldest)
    target = resolve_target(old, None)
    assert target.version == oldest and target.source == "flag"
    assert target.warning is not None and "older than the oldest release table" in target.warning
    # Only what holds at every release is checked against a stand-in table.
    assert target.exact is False


def test_an_old_image_tag_is_named_in_the_warning() -> None:
    target = resolve_target(None, "vllm/vllm-openai:v0.3.3")
    assert target.version == available_versions()[0]
    assert target.warning is not None and "vllm/vllm-openai:v0.3.3" in target.warning
    assert target.origin == "image tag vllm/vllm-openai:v0.3.3"


def test_a_tabled_release_is_exact_and_says_where_it_was_read() -> None:
    newest = available_versions()[-1]
    target = resolve_target(None, f"vllm/vllm-openai:v{newest}")
    assert (target.version, target.source, target.exact) == (newest, "image", True)
    assert target.origin == f"image tag vllm/vllm-openai:v{newest}"


@pytest.mark.parametrize("text", ["{not json", '{"flags": 5}', "[]"])
def test_a_corrupt_table_or_index_is_a_one_line_error_naming_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str
) -> None:
    (tmp_path / "0.32.0.json").write_text(text)
    (tmp_path / "index.json").write_text(text)
    monkeypatch.setattr(loader, "releases_dir", lambda: tmp_path)
    for cached in (loader.available_versions, loader.load_release, loader.release_index):
        cached.cache_clear()
    try:
        for load in (lambda: loader.load_release("0.32.0"), loader.release_index):
            with pytest.raises(KvtoolError) as err:
                load()
            message = str(err.value)
            assert str(tmp_path) in message and "corrupt" in message
            assert "\n" not in message
    finally:
        for cached in (loader.available_versions, loader.load_release, loader.release_index):
            cached.cache_clear()
