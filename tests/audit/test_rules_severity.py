"""Severities that mean something, and the false alarms public threads contradict (issue 12).

error = the engine will not start or serves wrong output; warning = it runs but loses the
benefit; info = advice. Each test cites the source line or thread its expectation rests on.
"""

from __future__ import annotations

from kvtool.audit.engine import Auditor
from kvtool.audit.normalize import normalize
from kvtool.audit.settings import AuditSettings
from kvtool.releases import release_index
from tests.audit.rulekit import codes, config, ktc, opt, run
from tests.audit.test_engine import FixedTables, invocation

FORCE_ON = opt(
    "--disable-hybrid-kv-cache-manager", False, written="--no-disable-hybrid-kv-cache-manager"
)


def test_any_kv_transfer_config_before_0_13_turns_hma_off_whatever_the_flag() -> None:
    # vllm v0.12.0 vllm/config/vllm.py, VllmConfig.__post_init__: inside
    # `if not self.scheduler_config.disable_hybrid_kv_cache_manager:` it logs "Turning off
    # hybrid kv cache manager because `--kv-transfer-config` is set" and sets the flag to
    # True whenever `self.kv_transfer_config is not None`. The flag is a plain bool there,
    # so --no-disable-hybrid-kv-cache-manager (False) enters that branch too: HMA ends off
    # and the factory's "does not support HMA" error is never reached.
    # https://github.com/vllm-project/vllm/blob/v0.12.0/vllm/config/vllm.py
    cfg = ktc(kv_connector="LMCacheConnectorV1", kv_role="kv_both")
    assert "CN012" not in codes(run(config("0.12.0", cfg, FORCE_ON)))
    assert "CN012" not in codes(run(config("0.11.0", cfg, FORCE_ON)))
    # Nearest neighbour: 0.13.0 made the flag tri-state, so forcing it on reaches the factory.
    # https://github.com/vllm-project/vllm/blob/v0.13.0/vllm/config/vllm.py
    assert "CN012" in codes(run(config("0.13.0", cfg, FORCE_ON)))


def test_offload_flags_before_0_13_still_keep_hma_on() -> None:
    # vg: the --kv-offloading-* -> connector conversion ran after the HMA decision up to
    # 0.21.x, so native offload on 0.11.1-0.12.x still reaches the factory error
    # (OffloadingConnector has SupportsHMA only from 0.21.0).
    flags = (opt("--kv-offloading-backend", "native"), opt("--kv-offloading-size", "10"))
    assert "CN012" in codes(run(config("0.12.0", *flags)))


def test_security_floor_is_reported_once_per_run_and_release() -> None:
    # The floor is a fact about the release, not about each command; three commands on one
    # vulnerable release give one SC001 (issue 12, "Severity that means something").
    vulnerable = next(
        v for v in release_index().versions if "SC001" in codes(run(config(v), security=True))
    )
    auditor = Auditor(FixedTables(vulnerable), normalize, AuditSettings(vllm_version=vulnerable))
    report = auditor.run([invocation("m"), invocation("m", "-tp", "2"), invocation("m")])
    assert [f.code for f in report.findings].count("SC001") == 1
    # A second run is independent and reports it again.
    assert [f.code for f in auditor.run([invocation("m")]).findings].count("SC001") == 1
