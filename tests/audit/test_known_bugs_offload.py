"""SC002 rows for open OffloadingConnector crashes, matched on their exact triggers.

vllm-project/vllm#50454: Mamba-hybrid + `--mamba-cache-mode all` + native offload + MTP
(reported on 0.25.1). vllm-project/vllm#55503: OffloadingConnector with an `fs`
secondary tier + MTP (`secondary_tiers` and the `fs` tier from the release tables).
"""

from __future__ import annotations

from typing import Any

from tests.audit.rulekit import config, ktc, opt, run

QWEN36 = "Qwen/Qwen3.6-27B"  # attention + Gated DeltaNet (rules/models/families.toml)
MTP = opt("--speculative-config", {"method": "mtp", "num_speculative_tokens": 1})
NGRAM = opt("--speculative-config", {"method": "ngram", "num_speculative_tokens": 3})
ALL = opt("--mamba-cache-mode", "all")


def bugs(version: str, *options: Any, model: str = QWEN36) -> list[str]:
    return [
        f.evidence["bug"] for f in run(config(version, *options, model=model)) if f.code == "SC002"
    ]


def test_50454_fires_on_its_full_trigger() -> None:
    offload = opt("--kv-offloading-size", "32")
    assert "vllm-project/vllm#50454" in bugs("0.25.1", offload, ALL, MTP)


def test_50454_stays_quiet_on_each_nearest_neighbour() -> None:
    offload = opt("--kv-offloading-size", "32")
    assert "vllm-project/vllm#50454" not in bugs("0.25.1", offload, MTP)  # default cache mode
    assert "vllm-project/vllm#50454" not in bugs("0.25.1", offload, ALL, NGRAM)  # no MTP
    assert "vllm-project/vllm#50454" not in bugs("0.25.1", ALL, MTP)  # no offload
    dense = "meta-llama/Llama-3.1-8B-Instruct"
    assert "vllm-project/vllm#50454" not in bugs("0.25.1", offload, ALL, MTP, model=dense)
    assert "vllm-project/vllm#50454" not in bugs("0.25.0", offload, ALL, MTP)  # before 0.25.1


def tiered(tier: str) -> Any:
    return ktc(
        kv_connector="OffloadingConnector",
        kv_role="kv_both",
        kv_connector_extra_config={
            "spec_name": "TieringOffloadingSpec",
            "cpu_bytes_to_use": 32 << 30,
            "secondary_tiers": [{"type": tier, "root_dir": "/mnt/kv"}],
        },
    )


def test_55503_fires_on_an_fs_tier_with_mtp() -> None:
    assert "vllm-project/vllm#55503" in bugs("0.32.0", tiered("fs"), MTP)


def test_55503_stays_quiet_without_the_fs_tier_or_mtp() -> None:
    assert "vllm-project/vllm#55503" not in bugs("0.32.0", tiered("fs"), NGRAM)
    assert "vllm-project/vllm#55503" not in bugs("0.32.0", tiered("obj"), MTP)
    cpu_only = ktc(kv_connector="OffloadingConnector", kv_role="kv_both")
    assert "vllm-project/vllm#55503" not in bugs("0.32.0", cpu_only, MTP)
    assert "vllm-project/vllm#55503" not in bugs("0.22.1", tiered("fs"), MTP)  # no fs tier yet


def test_51094_wrong_output_at_chunk_boundaries_in_all_mode_until_0_28() -> None:
    # resolve_mamba_align_size (offloading/scheduler.py) aligns only "align" groups in the
    # 0.24.0-0.27.1 wheels and "align" or "all" from 0.28.0 (PR #51100, Fixes #51094).
    offload = opt("--kv-offloading-size", "32")
    assert "vllm-project/vllm#51094" in bugs("0.27.1", offload, ALL)
    assert "vllm-project/vllm#51094" not in bugs("0.28.0", offload, ALL)  # fixed
    assert "vllm-project/vllm#51094" not in bugs(
        "0.27.1", offload, opt("--mamba-cache-mode", "align")
    )
    dense = "meta-llama/Llama-3.1-8B-Instruct"
    assert "vllm-project/vllm#51094" not in bugs("0.27.1", offload, ALL, model=dense)


def test_45268_external_hit_on_mamba_align_until_0_23() -> None:
    # Scheduler._mamba_block_aligned_split asserts num_external_computed_tokens == 0 in the
    # 0.15.0-0.22.1 wheels; gone from 0.23.0 (PR #42554, regression test PR #45613).
    offload = opt("--kv-offloading-size", "32")
    align = opt("--mamba-cache-mode", "align")
    assert "vllm-project/vllm#45268" in bugs("0.22.0", offload, align)
    assert "vllm-project/vllm#45268" not in bugs("0.23.0", offload, align)  # fixed
    assert "vllm-project/vllm#45268" not in bugs("0.22.0", offload)  # mode not written
    assert "vllm-project/vllm#45268" not in bugs("0.22.0", align)  # no connector
    dense = "meta-llama/Llama-3.1-8B-Instruct"
    assert "vllm-project/vllm#45268" not in bugs("0.22.0", offload, align, model=dense)
