"""The per-release HMA decision read from VllmConfig (scripts/releasegen/hma.py).

Two independent derivations must agree: the generator's AST reading of each wheel's
``vllm/config/vllm.py`` (``ReleaseFacts.hma``) and the curated ``hma.decision`` rows,
which were read by hand from the same source (rules/curated/semantics.toml). The source
lines the modes rest on, at the release tags:
- https://github.com/vllm-project/vllm/blob/v0.12.0/vllm/config/vllm.py - under
  ``if not self.scheduler_config.disable_hybrid_kv_cache_manager:``, any
  ``kv_transfer_config`` sets the flag to True (forces_off);
- https://github.com/vllm-project/vllm/blob/v0.13.0/vllm/config/vllm.py - only under
  ``if self.scheduler_config.disable_hybrid_kv_cache_manager is None:`` (when_unset);
- https://github.com/vllm-project/vllm/blob/v0.22.0/vllm/config/vllm.py - ``supports_hma``
  on the connector class, after ``_post_init_kv_transfer_config()`` (per_connector);
  v0.23.0 calls ``KVConnectorFactory.supports_hma_config`` instead.
"""

from __future__ import annotations

import sys

import pytest
from packaging.version import Version

from kvtool.releases import load_release, release_index, semantic_facts
from tests.conftest import REPO_ROOT
from tests.releases.wheelcache import release_wheel

sys.path.insert(0, str(REPO_ROOT / "scripts"))
from releasegen.hma import hma_decision
from releasegen.source import WheelSource

CURATED_TO_GENERATED = {
    "forced_off_with_connector": "forces_off",
    "off_with_any_connector": "when_unset",
    "auto_off_for_non_hma_connector": "per_connector",
}


def _curated(key: str, version: str) -> str | None:
    row = next((f for f in semantic_facts() if f.key == key and f.contains(version)), None)
    return row.value if row is not None else None


# The hybrid KV cache manager first appears in v0.9.1 (vllm/config.py); older releases
# have no decision to read, and no curated row may claim one.
FIRST_HMA = Version("0.9.1")


@pytest.mark.parametrize("version", release_index().versions)
def test_generated_hma_mode_agrees_with_the_curated_rows(version: str) -> None:
    hma = load_release(version).hma
    curated = _curated("hma.decision", version)
    if Version(version) < FIRST_HMA:
        assert hma is None and curated is None, version
        return
    assert hma is not None, f"{version}: no HMA decision read from VllmConfig"
    assert curated is not None and CURATED_TO_GENERATED[curated] == hma.mode
    # The offload conversion moved before the decision with per-connector HMA (0.22.0).
    assert hma.offload_converted_first is (hma.mode == "per_connector")
    assert hma.warning_names_connector is (
        _curated("hma.warning_names_connector", version) == "true"
    )


def test_forcing_hma_on_where_unsupported_raises_from_the_tri_state_flag_on() -> None:
    # The "explicitly enabled but is not supported" ValueError arrived with the tri-state
    # flag (v0.13.0 vllm/config/vllm.py); before it the flag was a plain bool.
    for version in release_index().versions:
        hma = load_release(version).hma
        if Version(version) < FIRST_HMA:
            continue
        assert hma is not None
        assert hma.forced_on_conflict_raises is (Version(version) >= Version("0.13.0"))


@pytest.mark.network
@pytest.mark.parametrize("version", ["0.12.0", "0.21.0", "0.22.0"])
def test_hma_decision_rederived_from_the_wheel(version: str) -> None:
    source = WheelSource(release_wheel(version))
    try:
        assert hma_decision(source) == load_release(version).hma
    finally:
        source.close()
