"""vLLM adapter for kvtool's lazy-offload connector: the only package that imports vLLM.

Load it with::

    --kv-transfer-config '{"kv_connector": "KvtoolConnector",
                           "kv_connector_module_path": "kvtool.connector.vllm",
                           "kv_role": "kv_both",
                           "kv_connector_extra_config": {"kvtool.policy": "eviction_aware"}}'

(keys: :mod:`kvtool.connector.config`). Prefix caching must be on: a buffered
block is validated by its prefix-cache hash.

The adapter translates vLLM's ``KVConnectorBase_V1`` hooks into calls on the
engine-agnostic core and back (hook order: vllm/v1/core/sched/scheduler.py and
vllm/v1/worker/kv_connector_model_runner_mixin.py at v0.32.0). It is split as
vLLM's own OffloadingConnector is (offloading_connector.py delegating to
offloading/scheduler.py, worker.py and metrics.py):

- :mod:`.connector`: :class:`KvtoolConnector`, the class vLLM loads. It reads
  the settings every process shares and routes each hook to its role's side.
- :mod:`.scheduler` (EngineCore process): the manager over vLLM's block pool,
  host-store lookups, store and load jobs, KV events for the host tier.
- :mod:`.worker` (one per rank): the transfer engine over vLLM's KV tensors.
- :mod:`.metrics`: the counters vLLM aggregates and shows on ``/metrics``.
- :mod:`.common`: the messages between the roles and the KV layout both derive.

Supported releases: the series in :data:`kvtool.connector.series.SUPPORTED_SERIES`;
importing this package under any other release raises :class:`UnsupportedVllmError`
naming them. Where those releases differ, the adapter checks for the feature (a field,
a hook), never the version string.
"""

from __future__ import annotations

import logging

import vllm

from kvtool.connector.series import SUPPORTED_SERIES, adapter_supports, supported_text
from kvtool.errors import KvtoolError


class UnsupportedVllmError(KvtoolError, ImportError):
    """The installed vLLM is a release this adapter was not written for."""


def check_vllm_version(version: str) -> None:
    """Raise UnsupportedVllmError unless ``version`` is in a supported series."""
    if not adapter_supports(version):
        raise UnsupportedVllmError(
            f"kvtool.connector.vllm supports vLLM {supported_text()}; this is vLLM {version}"
        )


check_vllm_version(vllm.__version__)


def _log_through_vllm() -> None:
    """Send kvtool's log records to vLLM's handlers, so they appear in the engine log.

    vLLM configures only its own ``vllm`` logger; without this the start-up line
    and the core's warnings would reach no handler.
    """
    ours, theirs = logging.getLogger("kvtool"), logging.getLogger("vllm")
    if ours.handlers or not theirs.handlers:
        return
    for handler in theirs.handlers:
        ours.addHandler(handler)
    ours.setLevel(theirs.level or logging.INFO)
    ours.propagate = False


_log_through_vllm()

# Imported only after the version check: other releases lay vLLM's modules out differently.
from kvtool.connector.vllm.connector import KvtoolConnector  # noqa: E402

__all__ = ["SUPPORTED_SERIES", "KvtoolConnector", "UnsupportedVllmError", "check_vllm_version"]
