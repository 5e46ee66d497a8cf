"""Golden tests for the LZ rules (LMCache 0.5.6 lazy offload, shared/reference/lazy-offload.md)."""

from __future__ import annotations

from typing import Any

from kvtool.audit.model import Finding
from tests.audit.rulekit import codes, config, ktc, only, opt, run


def lazy(**extra: Any) -> list[Finding]:
    cfg = ktc(kv_connector="LMCacheMPConnector", kv_role="kv_both", kv_connector_extra_config=extra)
    return run(config("0.32.0", cfg))


def test_lz001_typo_in_a_lazy_offload_key_is_named_with_the_right_key() -> None:
    finding = only(
        lazy(**{"lmcache.mp.lazy_offload": True, "lmcache.mp.lazy_offload_treshold": 20}), "LZ001"
    )
    assert "`lmcache.mp.lazy_offload_threshold`" in finding.message
    assert finding.flag == "lmcache.mp.lazy_offload_treshold"


def test_lz002_policy_names_are_case_sensitive() -> None:
    # lazy-offload.md §2: "fifo" fails with Unknown offload policy.
    finding = only(
        lazy(**{"lmcache.mp.lazy_offload": True, "lmcache.mp.lazy_offload_policy": "fifo"}), "LZ002"
    )
    assert "`FIFO`" in finding.message
    assert "LZ002" not in codes(
        lazy(**{"lmcache.mp.lazy_offload": True, "lmcache.mp.lazy_offload_policy": "FIFO"})
    )


def test_lz003_fifo_knobs_zero_or_not_integers() -> None:
    # lazy-offload.md §2: select_count <= 0 drains one request per drain; int("x") raises.
    base = {
        "lmcache.mp.lazy_offload": True,
        "lmcache.mp.lazy_offload_policy": "FIFO",
        "lmcache.mp.lazy_offload_threshold": 5,
    }
    zero = only(lazy(**base, **{"lmcache.mp.lazy_offload_select_count": 0}), "LZ003")
    assert zero.severity.value == "warning" and "exactly one request" in zero.message
    text = only(lazy(**base, **{"lmcache.mp.lazy_offload_select_count": "ten"}), "LZ003")
    assert text.severity.value == "error"


def test_lz004_eviction_aware_ranges() -> None:
    # lazy-offload.md §3 knobs table: horizon > 0, max_drain >= 1 after int(float()), deferral >= 0.
    on = {"lmcache.mp.lazy_offload": True}
    assert (
        len(
            [
                f
                for f in lazy(**on, **{"lmcache.mp.lazy_offload_horizon_steps": 0})
                if f.code == "LZ004"
            ]
        )
        == 1
    )
    assert "LZ004" in codes(lazy(**on, **{"lmcache.mp.lazy_offload_max_drain_per_step": "0.5"}))
    assert "LZ004" not in codes(lazy(**on, **{"lmcache.mp.lazy_offload_max_drain_per_step": "1.9"}))
    assert "LZ004" in codes(lazy(**on, **{"lmcache.mp.lazy_offload_max_deferral_seconds": -1}))


def test_lz005_lazy_offload_requires_prefix_caching() -> None:
    # lazy-offload.md §4 item 1.
    cfg = ktc(
        kv_connector="LMCacheMPConnector",
        kv_connector_extra_config={"lmcache.mp.lazy_offload": True},
    )
    off = opt("--enable-prefix-caching", False, written="--no-enable-prefix-caching")
    assert "LZ005" in codes(run(config("0.32.0", cfg, off)))
    assert "LZ005" not in codes(run(config("0.32.0", cfg)))


def test_lz006_default_fifo_threshold_never_drains_in_time() -> None:
    # lazy-offload.md §8 A: FIFO 100/10 stored nothing in a 30-minute run.
    finding = only(
        lazy(**{"lmcache.mp.lazy_offload": True, "lmcache.mp.lazy_offload_policy": "FIFO"}), "LZ006"
    )
    assert "100 finished requests" in finding.message
    small = {
        "lmcache.mp.lazy_offload": True,
        "lmcache.mp.lazy_offload_policy": "FIFO",
        "lmcache.mp.lazy_offload_threshold": 2,
    }
    assert "LZ006" not in codes(lazy(**small))


def test_lz007_string_false_is_true() -> None:
    # lazy-offload.md §6 item 7.
    finding = only(lazy(**{"lmcache.mp.lazy_offload": "false"}), "LZ007")
    assert "reads as on" in finding.message


def test_lz008_knobs_without_lazy_offload_or_for_the_other_policy() -> None:
    assert "LZ008" in codes(lazy(**{"lmcache.mp.lazy_offload_threshold": 20}))
    ea_with_fifo_knob = lazy(
        **{"lmcache.mp.lazy_offload": True, "lmcache.mp.lazy_offload_threshold": 20}
    )
    assert "ignored by the EVICTION_AWARE policy" in only(ea_with_fifo_knob, "LZ008").message
    other = ktc(
        kv_connector="NixlConnector", kv_connector_extra_config={"lmcache.mp.lazy_offload": True}
    )
    assert "LZ008" in codes(run(config("0.32.0", other)))


def test_lz003_infinite_threshold_is_not_an_integer() -> None:
    # JSON "Infinity" parses to float("inf"); LMCache's int() raises OverflowError on it.
    fifo = {"lmcache.mp.lazy_offload": True, "lmcache.mp.lazy_offload_policy": "FIFO"}
    finding = only(lazy(**fifo, **{"lmcache.mp.lazy_offload_threshold": float("inf")}), "LZ003")
    assert finding.severity.value == "error"
