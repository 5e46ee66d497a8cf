"""Rule premises per release: the generated proofs, their verdicts, and the rules that read them.

The premise ranges are proven from the wheels by scripts/gen_premises.py (the markers and
ranges in rules/curated/premises.toml); the behaviour tests below derive the releases
they check from the committed proofs, so a moved boundary moves the test with it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib

import msgspec
import pytest
from packaging.version import Version

from kvtool.audit.model import Severity
from kvtool.audit.registry import registry
from kvtool.audit.rules._premises import (
    PremiseRecord,
    capped,
    premise,
    premise_records,
    verdict_of,
)
from kvtool.releases import release_index
from tests.audit.rulekit import codes, config, ktc, only, opt, run
from tests.conftest import REPO_ROOT
from tests.releases.wheelcache import pypi_reachable

sys.path.insert(0, str(REPO_ROOT / "scripts"))
from gen_premises import CURATED, OUTPUT, premise_range
from releasegen.prover import Prover

RELEASES = release_index().versions


def _before(version: str) -> str:
    """The tabled release just before ``version``."""
    return max((v for v in RELEASES if Version(v) < Version(version)), key=Version)


def test_every_curated_premise_is_proven_with_the_range_it_claims() -> None:
    curated = tomllib.loads(CURATED.read_text())["premises"]
    records = premise_records()
    assert sorted(records) == sorted(row["id"] for row in curated)
    for row in curated:
        record = records[row["id"]]
        assert (record.since, record.until) == premise_range(row), row["id"]
        assert record.proven, f"{row['id']} is not proven from the wheels"
        assert all(registry.get(code) is not None for code in record.rules), row["id"]


def test_a_premise_is_false_outside_its_range_and_unverified_past_the_wheels() -> None:
    record = premise_records()["none_hash.random_without_hashseed"]
    assert record.until is not None
    assert premise(record.id, _before(record.until)) == premise(
        record.id, record.since or RELEASES[0]
    )
    if record.since is not None:  # the marker's code is not there before its first release
        assert not premise(record.id, _before(record.since)).holds
    assert premise(record.id, _before(record.until)).verified
    assert not premise(record.id, record.until).holds
    open_ended = premise_records()["none_hash.random_for_non_crypto_hash"]
    newer = Version(open_ended.checked_through)
    beyond = f"{newer.major}.{newer.minor + 1}.0"
    verdict = premise(open_ended.id, beyond)
    assert verdict.holds and not verdict.verified
    assert open_ended.checked_through in verdict.note
    assert capped(Severity.error, verdict) is Severity.warning
    assert capped(Severity.info, verdict) is Severity.info


def test_an_unproven_premise_caps_findings_and_says_so() -> None:
    unproven = PremiseRecord(
        id="x",
        package="vllm",
        rules=(),
        statement="the tier refuses to start",
        source="https://example.invalid",
        since="0.20.0",
        proven=False,
        checked_through="0.34.0",
    )
    assert not verdict_of(unproven, "0.19.1").holds
    inside = verdict_of(unproven, "0.20.0")
    assert inside.holds and not inside.verified
    assert "could not prove" in inside.note and "the tier refuses to start" in inside.note
    assert capped(Severity.error, inside) is Severity.warning
    proven = verdict_of(msgspec.structs.replace(unproven, proven=True), "0.20.0")
    assert proven.verified and proven.note == ""
    assert capped(Severity.error, proven) is Severity.error


SHARED_FS = ktc(
    kv_connector="OffloadingConnector",
    kv_role="kv_both",
    kv_connector_extra_config={"secondary_tiers": [{"type": "fs", "path": "/mnt/kv"}]},
)


def test_cn022_only_where_none_hash_is_random() -> None:
    # vllm v0.28.0 kv_cache_utils.init_none_hash: os.urandom(32) without PYTHONHASHSEED;
    # v0.29.0: a fixed DEFAULT_NONE_HASH_SEED for sha256, random only for xxhash(_cbor).
    fixed_from = premise_records()["none_hash.random_for_non_crypto_hash"].since
    assert fixed_from is not None
    assert "CN022" in codes(run(config(_before(fixed_from), SHARED_FS)))
    quiet = run(config(fixed_from, SHARED_FS))
    assert "CN022" not in codes(quiet)
    xxhash = opt("--prefix-caching-hash-algo", "xxhash")
    finding = only(run(config(RELEASES[-1], SHARED_FS, xxhash)), "CN022")
    assert "--prefix-caching-hash-algo xxhash" in finding.message
    # Nearest neighbour: the same xxhash deployment with PYTHONHASHSEED set.
    seeded = config(RELEASES[-1], SHARED_FS, xxhash, env={"PYTHONHASHSEED": "0"})
    assert "CN022" not in codes(run(seeded))


def test_vg031_loads_an_unregistered_spec_from_spec_module_path() -> None:
    # vllm v0.22.0 vllm/v1/kv_offload/factory.py create_spec: an unregistered spec_name is
    # imported from spec_module_path; only without one does it raise "Unsupported spec type".
    extra = {"spec_name": "AcmeOffloadingSpec"}
    for version in ("0.20.0", "0.22.0", RELEASES[-1]):
        refused = ktc(kv_connector="OffloadingConnector", kv_connector_extra_config=extra)
        assert "VG031" in codes(run(config(version, refused))), version
        loaded = ktc(
            kv_connector="OffloadingConnector",
            kv_connector_extra_config={**extra, "spec_module_path": "acme.offload"},
        )
        assert "VG031" not in codes(run(config(version, loaded))), version


def test_cn035_only_from_the_release_that_forces_nogds_for_tp() -> None:
    since = premise_records()["load_format.fastsafetensors_nogds_tp"].since
    assert since is not None
    flags = (opt("--load-format", "fastsafetensors"), opt("--tensor-parallel-size", "8"))
    assert "CN035" in codes(run(config(since, *flags)))
    assert "CN035" not in codes(run(config(_before(since), *flags)))


def _wheels_at_hand(record_checks: list[dict[str, object]]) -> bool:
    """Every wheel a premise's proof reads is in the prover's cache (wheel or members)."""
    cache = Prover().cache_dir
    return all(
        (cache / str(c["wheel"])).is_file() or (cache / "members" / str(c["sha256"])).is_dir()
        for c in record_checks
    )


@pytest.mark.network
@pytest.mark.timeout(900)
def test_premise_proofs_match_the_wheels() -> None:
    """scripts/gen_premises.py --check --only re-proves the premises whose wheels are at hand
    (all of them on a machine that ran the generator; the full run reads 21 wheels)."""
    committed = json.loads(OUTPUT.read_text())["premises"]
    ready = [r["id"] for r in committed if _wheels_at_hand(r["checks"])]
    if not ready and not pypi_reachable():
        pytest.skip("no premise's wheels are cached and pypi.org:443 is unreachable")
    ids = ready or [committed[0]["id"]]  # cold cache: fetch one premise's wheels
    proc = subprocess.run(
        [sys.executable, str(REPO_ROOT / "scripts" / "gen_premises.py"), "--check", "--only", *ids],
        capture_output=True,
        text=True,
        timeout=840,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "no drift" in proc.stderr


def test_rules_read_curated_release_facts_only_through_proven_premises() -> None:
    """A rule module that asks the curated semantics rows directly would bypass the proof."""
    rules_dir = REPO_ROOT / "kvtool" / "audit" / "rules"
    direct = [
        str(path.relative_to(rules_dir))
        for path in sorted(rules_dir.rglob("*.py"))
        if "semantics.holds(" in path.read_text() or "semantics.fact(" in path.read_text()
    ]
    assert direct == [], f"read these facts through kvtool.audit.rules._premises: {direct}"
