"""CN051: llm-d's routing sidecar and the engine in its pod must speak the same protocol.

Manifest shapes follow llm-d decode pods: the sidecar is a native sidecar (an init
container with ``restartPolicy: Always``) in front of the decode vLLM container, as in
llm-d-incubation/llm-d-modelservice's ``routingProxy`` template (``--connector=nixlv2``) and
KServe's ``kserve-config-llm-decode-template`` (image ghcr.io/llm-d/llm-d-routing-sidecar).
The flag and its default: llm-d/llm-d-inference-scheduler cmd/pd-sidecar/main.go
(``-connector``/``-kv-connector``, default ``nixlv2``).
"""

from __future__ import annotations

import json

from kvtool.audit.engine import Auditor
from kvtool.audit.inputs import read_text
from kvtool.audit.normalize import normalize
from kvtool.audit.rules.disagg import routing_sidecar
from kvtool.audit.settings import AuditSettings
from tests.audit.test_engine import FixedTables

NIXL = json.dumps({"kv_connector": "NixlConnector", "kv_role": "kv_both"})
OFFLOAD = json.dumps({"kv_connector": "OffloadingConnector", "kv_role": "kv_both"})
MULTI_WITH_NIXL = json.dumps(
    {
        "kv_connector": "MultiConnector",
        "kv_role": "kv_both",
        "kv_connector_extra_config": {
            "connectors": [
                {"kv_connector": "NixlConnector", "kv_role": "kv_both"},
                {"kv_connector": "OffloadingConnector", "kv_role": "kv_both"},
            ]
        },
    }
)


def decode_pod(sidecar_args: list[str], engine_args: list[str], *, image: str | None = None) -> str:
    sidecar_image = image or "ghcr.io/llm-d/llm-d-routing-sidecar:v0.3.0"
    return f"""\
apiVersion: apps/v1
kind: Deployment
metadata: {{name: decode}}
spec:
  template:
    metadata:
      labels: {{llm-d.ai/role: decode}}
    spec:
      initContainers:
        - name: routing-proxy
          image: {sidecar_image}
          args: {json.dumps(sidecar_args)}
          restartPolicy: Always
      containers:
        - name: vllm
          image: vllm/vllm-openai:v0.32.0
          command: [vllm, serve, Qwen/Qwen3-0.6B]
          args: {json.dumps(["--port", "8200", *engine_args])}
"""


def cn051(text: str) -> list[str]:
    invocations = read_text(text, "decode.yaml")
    report = Auditor(FixedTables("0.32.0"), normalize, AuditSettings(vllm_version="0.32.0")).run(
        invocations
    )
    return [f.severity.value for f in report.findings if f.code == "CN051"]


def test_a_nixl_sidecar_next_to_an_engine_without_a_connector_is_an_error() -> None:
    assert cn051(decode_pod(["--port=8000", "--vllm-port=8200", "--connector=nixlv2"], [])) == [
        "error"
    ]


def test_a_nixl_sidecar_next_to_native_offload_only_is_an_error() -> None:
    args = ["--kv-transfer-config", OFFLOAD]
    assert cn051(decode_pod(["--kv-connector", "nixlv2"], args)) == ["error"]


def test_the_sidecar_default_is_nixl() -> None:
    # No connector flag: pd-sidecar and llm-d-routing-sidecar both default to nixlv2.
    assert cn051(decode_pod(["--port=8000"], [])) == ["error"]


def test_an_engine_with_nixl_is_quiet() -> None:
    sidecar = ["--port=8000", "--vllm-port=8200", "--connector=nixlv2"]
    assert cn051(decode_pod(sidecar, ["--kv-transfer-config", NIXL])) == []
    # A MultiConnector with a NixlConnector child speaks NIXL too.
    assert cn051(decode_pod(sidecar, ["--kv-transfer-config", MULTI_WITH_NIXL])) == []


def test_a_sidecar_speaking_another_protocol_is_not_judged_here() -> None:
    # shared-storage: prefill and decode meet in a shared store, not through NIXL.
    args = ["--kv-transfer-config", OFFLOAD]
    assert cn051(decode_pod(["-kv-connector=shared-storage"], args)) == []


def test_a_container_that_is_no_routing_sidecar_is_ignored() -> None:
    assert cn051(decode_pod(["--connector=nixlv2"], [], image="busybox:1.36")) == []


def test_sidecar_recognition_reads_go_flag_spellings() -> None:
    invocation = read_text(
        decode_pod(
            ["-connector", "nixl"], [], image="ghcr.io/llm-d/llm-d-router-disagg-sidecar@sha256:00"
        ),
        "decode.yaml",
    )[0]
    (sidecar,) = invocation.pod_containers
    found = routing_sidecar(sidecar)
    assert found is not None and found.protocol == "nixl"


# llm-d-modelservice values (the shape of its examples/values-pd.yaml): the chart renders
# the routing sidecar into decode pods from `routing.proxy` (templates/_helpers.tpl
# `llm-d-modelservice.routingProxy`: on unless `enabled: false`, `--connector` defaulting
# to nixlv2), never into prefill pods.
def modelservice_values(proxy: str, engine_args: list[str]) -> str:
    args = "".join(f"      - '{word}'\n" for word in engine_args)
    role = "  containers:\n  - name: vllm\n    image: ghcr.io/llm-d/llm-d-cuda:v0.3.0\n"
    role += "    modelCommand: vllmServe\n" + (f"    args:\n{args}" if args else "")
    return (
        'modelArtifacts:\n  name: Qwen/Qwen3-0.6B\n  uri: "hf://Qwen/Qwen3-0.6B"\n'
        f"routing:\n  servicePort: 8000\n{proxy}"
        f"decode:\n  create: true\n{role}prefill:\n  create: true\n{role}"
    )


def cn051_values(text: str) -> list[tuple[str, int | None]]:
    invocations = read_text(text, "values.yaml")
    report = Auditor(FixedTables("0.32.0"), normalize, AuditSettings(vllm_version="0.32.0")).run(
        invocations
    )
    return [
        (f.severity.value, f.location.line if f.location else None)
        for f in report.findings
        if f.code == "CN051"
    ]


def _line_of(text: str, needle: str) -> int:
    return next(n for n, line in enumerate(text.splitlines(), 1) if needle in line)


def test_the_charts_routing_proxy_is_seen_in_the_decode_pod() -> None:
    offload = ["--kv-transfer-config", OFFLOAD]
    # `secure` only: the chart's default connector, nixlv2 (one finding: decode, not prefill).
    values = modelservice_values("  proxy:\n    secure: false\n", offload)
    assert cn051_values(values) == [("error", _line_of(values, "--kv-transfer-config"))]
    # The connector the values name; and a proxy that names none, with the engine flagless.
    values = modelservice_values("  proxy:\n    connector: nixl\n", [])
    (finding,) = cn051_values(values)
    assert finding[0] == "error"
    invocations = read_text(values, "values.yaml")
    decode = next(i for i in invocations if "decode" in i.label)
    (sidecar,) = decode.pod_containers
    found = routing_sidecar(sidecar)
    assert found is not None and found.protocol == "nixl"
    assert found.location is not None and found.location.line == _line_of(values, "connector:")
    prefill = next(i for i in invocations if "prefill" in i.label)
    assert prefill.pod_containers == ()


def test_the_charts_routing_proxy_quiet_cases() -> None:
    nixl = ["--kv-transfer-config", NIXL]
    offload = ["--kv-transfer-config", OFFLOAD]
    # values-pd.yaml: NixlConnector on both roles behind the default nixlv2 proxy.
    assert cn051_values(modelservice_values("  proxy:\n    secure: false\n", nixl)) == []
    # The proxy switched off, or speaking what the engines share.
    assert cn051_values(modelservice_values("  proxy:\n    enabled: false\n", offload)) == []
    lmcache = "  proxy:\n    connector: lmcache\n"
    assert cn051_values(modelservice_values(lmcache, offload)) == []
    # Values that write no routing.proxy: what the chart defaults to is not read here.
    assert cn051_values(modelservice_values("", offload)) == []
