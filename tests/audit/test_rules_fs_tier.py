"""SZ024: vLLM's native fs offload tier has no capacity, so on node-local storage it
grows until the volume or the node's disk is full.

The tier's config shape is vLLM's TieringOffloadingSpec (``secondary_tiers`` entries with
``type`` and the tier's own parameters, here FileSystemTierManager's ``root_dir``:
https://github.com/vllm-project/vllm/blob/v0.32.0/vllm/v1/kv_offload/tiering/spec.py and
.../tiering/fs/manager.py). Volume shapes are the Kubernetes docs' emptyDir, hostPath and
persistentVolumeClaim examples (https://kubernetes.io/docs/concepts/storage/volumes/).
"""

from __future__ import annotations

import json

from packaging.version import Version

from kvtool.audit.engine import Auditor
from kvtool.audit.inputs import read_text
from kvtool.audit.normalize import normalize
from kvtool.audit.rules._premises import premise_records
from kvtool.audit.settings import AuditSettings
from kvtool.releases import release_index
from tests.audit.test_engine import FixedTables

FS_TIER = json.dumps(
    {
        "kv_connector": "OffloadingConnector",
        "kv_role": "kv_both",
        "kv_connector_extra_config": {
            "spec_name": "TieringOffloadingSpec",
            "cpu_bytes_to_use": 8 << 30,
            "secondary_tiers": [{"type": "fs", "root_dir": "/mnt/kv"}],
        },
    }
)
CPU_ONLY = json.dumps({"kv_connector": "OffloadingConnector", "kv_role": "kv_both"})


def deployment(volume: str, transfer: str = FS_TIER, version: str = "0.32.0") -> str:
    return f"""\
apiVersion: apps/v1
kind: Deployment
metadata: {{name: vllm}}
spec:
  template:
    spec:
      containers:
        - name: vllm
          image: vllm/vllm-openai:v{version}
          command: [vllm, serve, m, -tp, "2", --kv-transfer-config, '{transfer}']
          env: [{{name: PYTHONHASHSEED, value: "0"}}]
          volumeMounts: [{{name: kv, mountPath: /mnt/kv}}]
      volumes:
        - name: kv
          {volume}
"""


def sz024(text: str, version: str = "0.32.0") -> list[str]:
    auditor = Auditor(FixedTables(version), normalize, AuditSettings(vllm_version=version))
    report = auditor.run(read_text(text, "deploy.yaml"))
    return [f.message for f in report.findings if f.code == "SZ024"]


def test_fs_tier_on_a_sized_emptydir_is_evicted_when_it_fills() -> None:
    [message] = sz024(deployment("emptyDir: {sizeLimit: 100Gi}"))
    assert "sizeLimit 100Gi" in message and "evicts the pod" in message


def test_fs_tier_on_host_path_or_unsized_emptydir_fills_the_node() -> None:
    for volume in ("hostPath: {path: /data/kv}", "emptyDir: {}"):
        [message] = sz024(deployment(volume))
        assert "node's disk" in message, volume


def test_fs_tier_on_a_claimed_volume_or_without_fs_is_quiet() -> None:
    assert sz024(deployment("persistentVolumeClaim: {claimName: kv}")) == []
    assert sz024(deployment("emptyDir: {sizeLimit: 100Gi}", transfer=CPU_ONLY)) == []


def test_fs_tier_rule_follows_its_premise_range() -> None:
    record = premise_records()["offload_fs.no_capacity"]
    assert record.proven and record.since is not None
    older = [v for v in release_index().versions if Version(v) < Version(record.since)]
    sized = "emptyDir: {sizeLimit: 100Gi}"
    assert sz024(deployment(sized, version=older[-1]), older[-1]) == []
    assert sz024(deployment(sized, version=record.since), record.since)
