"""offload_extra_config_keys: what OffloadingConnector reads from kv_connector_extra_config.

Read from each wheel's vllm/v1/kv_offload/** (scripts/releasegen/registries.py). Source lines:
- https://github.com/vllm-project/vllm/blob/v0.11.0/vllm/v1/kv_offload/factory.py
  ``extra_config.get("spec_name", "CPUOffloadingSpec")``; v0.11.0 cpu.py reads
  ``num_cpu_blocks``;
- https://github.com/vllm-project/vllm/blob/v0.32.0/vllm/v1/kv_offload/cpu/spec.py reads
  ``cpu_bytes_to_use`` (the --kv-offloading-size conversion writes the same key).
"""

from __future__ import annotations

import sys

import pytest

from kvtool.releases import load_release, release_index
from tests.conftest import REPO_ROOT
from tests.releases.wheelcache import release_wheel

sys.path.insert(0, str(REPO_ROOT / "scripts"))
from releasegen import registries
from releasegen.source import WheelSource


def test_the_spec_selector_is_read_wherever_offload_exists() -> None:
    for version in release_index().versions:
        table = load_release(version)
        if "OffloadingConnector" in {c.name for c in table.connectors}:
            assert "spec_name" in table.offload_extra_config_keys, version


def test_the_tier_is_sized_by_blocks_first_then_by_bytes() -> None:
    assert "num_cpu_blocks" in load_release("0.11.0").offload_extra_config_keys
    assert "cpu_bytes_to_use" in load_release("0.32.0").offload_extra_config_keys
    assert "lazy_offload" not in load_release("0.32.0").offload_extra_config_keys


@pytest.mark.network
def test_keys_rederived_from_the_wheel() -> None:
    source = WheelSource(release_wheel("0.32.0"))
    try:
        derived = tuple(registries.offload_extra_config_keys(source))
    finally:
        source.close()
    assert derived == load_release("0.32.0").offload_extra_config_keys
