"""Config: documented keys and defaults, clear errors for bad input."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import yaml

from kvtool.connector.config import (
    ConnectorConfig,
    ConnectorConfigError,
    HostArenaMode,
    ShutdownMode,
)
from kvtool.connector.policies import POLICIES, POLICY_NAMES
from kvtool.errors import KvtoolError

REPO = Path(__file__).resolve().parents[2]


def test_defaults_are_the_documented_ones() -> None:
    config = ConnectorConfig.from_extra_config({})
    assert config.policy == "eviction_aware"
    # LMCache 0.5.6's defaults (lazy-offload.md §2, §3): FIFO 100 / 10, horizon 2.5.
    assert (config.fifo_threshold, config.fifo_select_count, config.horizon_steps) == (100, 10, 2.5)
    assert config.max_deferral_seconds == 0.0
    assert config.shutdown is ShutdownMode.DRAIN
    assert config.shutdown_drain_seconds == 30.0
    assert config.load_async is False
    assert config.host_arena is HostArenaMode.HOST


def test_keys_are_read_from_strings_and_native_values() -> None:
    config = ConnectorConfig.from_extra_config({
        "kvtool.policy": "FIFO",
        "kvtool.fifo.threshold": "20",
        "kvtool.fifo.select_count": 10,
        "kvtool.eviction_aware.horizon_steps": "3.5",
        "kvtool.host_capacity_bytes": "512MiB",
        "kvtool.shutdown": "drop",
        "kvtool.shutdown_drain_seconds": "2.5",
        "kvtool.load_async": "false",
        "lmcache.mp.host": "localhost",  # another connector's key: ignored
    })
    assert config.policy == "fifo"
    assert (config.fifo_threshold, config.fifo_select_count) == (20, 10)
    assert config.horizon_steps == 3.5
    assert config.host_capacity_bytes == 512 * 2**20
    assert config.shutdown is ShutdownMode.DROP
    assert config.shutdown_drain_seconds == 2.5
    assert config.load_async is False


def test_unknown_key_names_the_closest_known_one() -> None:
    expected = r"'kvtool\.fifo\.treshold'.*did you mean 'kvtool\.fifo\.threshold'"
    with pytest.raises(ConnectorConfigError, match=expected):
        ConnectorConfig.from_extra_config({"kvtool.fifo.treshold": 5})


def test_unknown_policy_lists_the_policies() -> None:
    with pytest.raises(ConnectorConfigError, match="eager, fifo, eviction_aware"):
        ConnectorConfig.from_extra_config({"kvtool.policy": "lru"})


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("kvtool.fifo.threshold", 0, ">= 1"),
        ("kvtool.fifo.select_count", -1, ">= 1"),
        ("kvtool.fifo.select_count", "1.5", "whole number"),
        ("kvtool.fifo.threshold", "abc", "not an integer"),
        ("kvtool.fifo.threshold", True, "not an integer"),
        ("kvtool.eviction_aware.horizon_steps", 0, "> 0"),
        ("kvtool.eviction_aware.horizon_steps", "nan", "finite"),
        ("kvtool.eviction_aware.max_deferral_seconds", -1, ">= 0"),
        ("kvtool.max_release_blocks_per_step", "0.5", "whole number"),
        ("kvtool.idle_drain_steps", 0, ">= 1"),
        ("kvtool.host_capacity_bytes", "12 parsecs", "not a size"),
        ("kvtool.host_capacity_bytes", 0, "> 0 bytes"),
        ("kvtool.shutdown", "flush", "'drain' or 'drop'"),
        ("kvtool.shutdown_drain_seconds", 0, "> 0"),
    ],
)
def test_out_of_range_values_name_key_and_bound(key: str, value: object, message: str) -> None:
    with pytest.raises(ConnectorConfigError) as info:
        ConnectorConfig.from_extra_config({key: value})
    assert key in str(info.value)
    assert message in str(info.value)
    assert isinstance(info.value, KvtoolError) and isinstance(info.value, ValueError)


def test_startup_line_names_policy_and_knobs(caplog: pytest.LogCaptureFixture) -> None:
    config = ConnectorConfig.from_extra_config(
        {"kvtool.policy": "fifo", "kvtool.fifo.threshold": 20, "kvtool.fifo.select_count": 10}
    )
    with caplog.at_level(logging.INFO):
        config.log_startup(logging.getLogger("kvtool.test"))
    assert "fifo policy" in caplog.text
    assert "threshold=20" in caplog.text and "select_count=10" in caplog.text
    ea = ConnectorConfig.from_extra_config({}).describe()
    assert "eviction_aware policy" in ea and "horizon_steps=2.5" in ea
    assert "threshold" not in ea


@pytest.mark.parametrize(("raw", "expected"), [(True, True), ("false", False), ("1", True),
                                               ("off", False)])
def test_store_decode_reads_booleans(raw: object, expected: bool) -> None:
    config = ConnectorConfig.from_extra_config({"kvtool.store_decode": raw})
    assert config.store_decode is expected
    assert f"store_decode={str(expected).lower()}" in config.describe()


def test_store_decode_refuses_what_is_not_a_boolean() -> None:
    with pytest.raises(ConnectorConfigError, match=r"kvtool\.store_decode='maybe' is not a bool"):
        ConnectorConfig.from_extra_config({"kvtool.store_decode": "maybe"})


@pytest.mark.parametrize(("raw", "expected"), [("rank", HostArenaMode.RANK),
                                               (" Host ", HostArenaMode.HOST)])
def test_host_arena_reads_host_or_rank(raw: str, expected: HostArenaMode) -> None:
    config = ConnectorConfig.from_extra_config({"kvtool.host_arena": raw})
    assert config.host_arena is expected
    assert f"host_arena={expected.value}" in config.describe()


def test_host_arena_refuses_other_scopes_naming_both() -> None:
    with pytest.raises(ConnectorConfigError,
                       match=r"kvtool\.host_arena='node'; use 'host' .* or 'rank'"):
        ConnectorConfig.from_extra_config({"kvtool.host_arena": "node"})


def test_every_registered_policy_is_a_valid_setting_and_nothing_else_is() -> None:
    # The registry is the only list: the config parser, simulate and the recipe read it.
    for name in POLICY_NAMES:
        config = ConnectorConfig.from_extra_config({"kvtool.policy": name.upper()})
        assert config.policy == name
        assert f"with {name} policy" in config.describe()
        for knob in POLICIES[name].describe_knobs(config):
            assert knob in config.describe()
    with pytest.raises(ConnectorConfigError, match="use one of " + ", ".join(POLICY_NAMES)):
        ConnectorConfig.from_extra_config({"kvtool.policy": "lru"})


def test_the_launch_recipe_has_one_variant_per_registered_policy() -> None:
    recipe = yaml.safe_load((REPO / "recipes" / "kvtool-connector.yaml").read_text())
    named = [v["extra_config"]["kvtool.policy"] for v in recipe["variants"]]
    assert sorted(named) == sorted(POLICY_NAMES)
