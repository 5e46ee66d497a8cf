"""Curated tables: every row cites a source, and the field guide's wrong claims are encoded
as the wheels show them (shared/reference/version-gates.md §2)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kvtool.errors import KvtoolError
from kvtool.releases import (
    backend_connector,
    backend_connector_map,
    bundling_pins,
    curated,
    load_release,
    release_index,
    replacements,
    resolve_target,
    security_floor,
    semantic,
    semantic_facts,
)


def _value(key: str, version: str) -> str | None:
    fact = semantic(key, version)
    return None if fact is None else fact.value


def test_every_curated_row_cites_a_source() -> None:
    tables = (
        replacements(),
        security_floor(),
        bundling_pins(),
        backend_connector_map(),
        semantic_facts(),
    )
    for table in tables:
        assert table, "curated table is empty"
        for row in table:
            if getattr(row, "verified", True) is False and "unverified" in row.source:
                continue  # a pin no public source shows, marked as such
            assert re.search(r"(https://|#\d+|wheel)", row.source), row


def test_security_floor_is_0_22_0() -> None:
    # field guide "Is the tag safe to run?" + GHSA-94f4-hr76-p5j6
    affected = lambda v: [a.id for a in security_floor() if a.contains(v)]  # noqa: E731
    assert "CVE-2026-48746" in affected("0.21.0")
    assert affected("0.22.0") == []
    assert affected("0.14.0") == ["CVE-2026-48746", "CVE-2026-22778"]
    assert "CVE-2026-22778" not in affected("0.14.1")
    assert "CVE-2025-59425" in affected("0.10.2") and "CVE-2025-59425" not in affected("0.11.0")


# --- the seven corrections of §2, as the wheels show them ---------------------------


def test_row9_hma_auto_enable_in_0_22_0_and_tristate_since_0_13_0() -> None:
    assert _value("hma.decision", "0.21.0") == "off_with_any_connector"
    assert _value("hma.decision", "0.22.0") == "auto_off_for_non_hma_connector"
    assert _value("hma.decision", "0.22.1") == "auto_off_for_non_hma_connector"
    assert _value("hma.disable_flag_default", "0.12.0") == "False"
    assert _value("hma.disable_flag_default", "0.13.0") == "None"
    # The generated table agrees: the CLI flag's default is None from 0.13.0.
    flags = {f.name: f for f in load_release("0.13.0").flags}
    assert flags["--disable-hybrid-kv-cache-manager"].default is None
    flags_012 = {f.name: f for f in load_release("0.12.0").flags}
    assert flags_012["--disable-hybrid-kv-cache-manager"].default is False


def test_row24_native_offload_hma_error_only_through_0_20_x() -> None:
    assert _value("hma.native_offload_factory_error", "0.20.2") == "raises"
    assert _value("hma.native_offload_factory_error", "0.21.0") is None
    assert _value("hma.native_offload_factory_error", "0.22.0") is None
    assert _value("hma.lmcache_backend_factory_error", "0.21.0") == "raises"


def test_row25_warning_names_connector_only_on_0_22_x() -> None:
    assert _value("hma.warning_names_connector", "0.22.1") == "true"
    assert _value("hma.warning_names_connector", "0.23.0") == "false"
    assert _value("hma.warning_names_connector", "0.33.0") == "false"


def test_rows4_5_calculate_kv_scales_deprecated_in_0_19_and_still_active_in_0_27_1() -> None:
    assert release_index().flags["--calculate-kv-scales"].deprecated_since == "0.19.0"
    assert _value("calculate_kv_scales.effect", "0.27.1") == "active"


def test_row12_p2p_pythonhashseed_check_0_27_0_to_0_28_x() -> None:
    assert _value("p2p.pythonhashseed_required", "0.26.0") is None
    assert _value("p2p.pythonhashseed_required", "0.27.0") == "raises_if_unset"
    assert _value("p2p.pythonhashseed_required", "0.28.0") == "raises_if_unset"
    assert _value("p2p.pythonhashseed_required", "0.29.0") is None


def test_row13_newest_release_is_the_newest_table_not_0_32_0() -> None:
    from packaging.version import Version

    newest = release_index().versions[-1]
    assert resolve_target(None, None).version == newest
    assert Version(newest) > Version("0.32.0")


def test_row28_mrv2_default_before_0_29_0() -> None:
    assert _value("mrv2.default_scope", "0.21.0") is None
    assert _value("mrv2.default_scope", "0.22.0") == "qwen3_dense_only"
    assert _value("mrv2.default_scope", "0.27.1") == "dense_generate_models"
    assert _value("mrv2.default_scope", "0.29.0") == "all_models"


def test_row45_moriio_hybrid_spec_decode() -> None:
    assert _value("moriio.hybrid_read_spec_decode", "0.31.0") == "none"
    assert _value("moriio.hybrid_read_spec_decode", "0.32.0") == "dspark_only"


def test_row7_fs_tier_is_fs_python_on_0_22() -> None:
    assert "fs" not in load_release("0.22.0").offload_tiers
    assert release_index().tiers["fs_python"].replacement == "fs"


# --- backend -> connector -------------------------------------------------------------


@pytest.mark.parametrize(
    ("backend", "version", "env", "connector", "activation", "scope"),
    [
        ("native", "0.11.1", {}, "OffloadingConnector", "backend", "total"),
        ("native", "0.13.0", {}, "OffloadingConnector", "backend", "total"),
        ("native", "0.14.0", {}, "OffloadingConnector", "size", "total"),
        (
            "native",
            "0.24.0",
            {"VLLM_USE_SIMPLE_KV_OFFLOAD": "1"},
            "SimpleCPUOffloadConnector",
            "size",
            "total",
        ),
        ("lmcache", "0.12.0", {}, "LMCacheConnectorV1", "backend", "total"),
        ("lmcache", "0.22.1", {}, "LMCacheConnectorV1", "size", "total"),
        ("lmcache", "0.23.0", {}, "LMCacheMPConnector", "size", "ignored"),
        ("lmcache", "0.33.0", {}, "LMCacheMPConnector", "size", "ignored"),
    ],
)
def test_backend_connector_map(
    backend: str, version: str, env: dict[str, str], connector: str, activation: str, scope: str
) -> None:
    row = backend_connector(backend, version, env)
    assert row is not None
    assert (row.connector, row.activation, row.size_scope) == (connector, activation, scope)
    # The mapped connector is registered in that release's factory.
    assert connector in {c.name for c in load_release(version).connectors}


def test_no_backend_mapping_before_the_flag_exists() -> None:
    assert backend_connector("native", "0.11.0") is None


def test_replacement_rows_point_at_names_that_exist_where_they_apply() -> None:
    index = release_index()
    for row in replacements():
        known = (index.flags, index.env_vars, index.connectors, index.tiers)
        assert any(row.name in table for table in known), row.name


# --- loader errors ----------------------------------------------------------------------


def test_malformed_curated_table_is_a_one_line_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bad = tmp_path / "broken.toml"
    bad.write_text('[[rows]]\nid = "X"\nsummary = "s"\nseverity = "critical"\n')
    monkeypatch.setattr(curated, "_curated_path", lambda name: tmp_path / name)
    curated._rows.cache_clear()
    try:
        with pytest.raises(KvtoolError) as err:
            curated._load("broken.toml", curated.SecurityAdvisory)
        assert "row 1" in str(err.value) and "source" in str(err.value)
        (tmp_path / "invalid.toml").write_text("rows = [\n")
        with pytest.raises(KvtoolError, match="not valid TOML"):
            curated._load("invalid.toml", curated.SecurityAdvisory)
    finally:
        curated._rows.cache_clear()


def test_dash_o_rewrite_per_release() -> None:
    # FlexibleArgumentParser rewrites -O before argparse sees it (§6 "Aliases and spellings");
    # the index shows -O as a --compilation-config alias only up to 0.11.x.
    assert _value("argv.dash_O", "0.10.2") == "compilation_config.level"
    assert _value("argv.dash_O", "0.11.2") == "compilation_config.mode"
    assert _value("argv.dash_O", "0.12.0") == "--optimization-level"
    assert _value("argv.dash_O", "0.33.0") == "--optimization-level"
    assert release_index().flags["-O"].gone_at == "0.12.0"
