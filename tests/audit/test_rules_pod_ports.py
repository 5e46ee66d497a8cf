"""Listeners that share one pod's network namespace (CN060), or a node's (CN067, pods with
hostNetwork), and a routing sidecar that forwards to a port its engine does not serve
(CN064).

Manifest shapes follow llm-d decode pods: the routing sidecar as a native sidecar (an
init container with ``restartPolicy: Always``) in front of the decode vLLM container, the
sidecar on ``--port=8000`` forwarding to ``--vllm-port=8200`` and vLLM on ``--port 8200``
(llm-d-incubation/llm-d-modelservice ``routingProxy`` template,
https://github.com/llm-d-incubation/llm-d-modelservice/blob/main/charts/llm-d-modelservice/templates/_helpers.tpl).
The sidecar's defaults (``-port`` 8000, ``-vllm-port`` 8001) are llm-d's
(https://github.com/llm-d/llm-d-inference-scheduler/blob/10df70b25e8339f5dc31bb97483ed63773c49750/cmd/pd-sidecar/main.go);
``vllm serve --port``'s default is read per release from the wheels
(rules/audit/listen_ports.json), so the tests derive it instead of naming it.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from kvtool.audit.engine import Auditor
from kvtool.audit.inputs import read_text
from kvtool.audit.model import Finding
from kvtool.audit.normalize import normalize
from kvtool.audit.rules._constraints import api_server_port_at
from kvtool.audit.settings import AuditSettings
from kvtool.releases import release_index
from tests.audit.test_engine import FixedTables
from tests.conftest import REPO_ROOT
from tests.releases.wheelcache import pypi_reachable

NEWEST = release_index().versions[-1]
SIDECAR_IMAGE = "ghcr.io/llm-d/llm-d-routing-sidecar:v0.3.0"


def pod(sidecar: dict[str, object], engine_args: list[str]) -> str:
    return f"""\
apiVersion: apps/v1
kind: Deployment
metadata: {{name: decode}}
spec:
  template:
    spec:
      initContainers:
        - {json.dumps(sidecar)}
      containers:
        - name: vllm
          image: vllm/vllm-openai:v{NEWEST}
          command: [vllm, serve, Qwen/Qwen3-0.6B]
          args: {json.dumps(engine_args)}
"""


def sidecar(*args: str) -> dict[str, object]:
    return {
        "name": "routing-proxy",
        "image": SIDECAR_IMAGE,
        "args": list(args),
        "restartPolicy": "Always",
    }


def findings(text: str, code: str) -> list[Finding]:
    invocations = read_text(text, "decode.yaml")
    auditor = Auditor(FixedTables(NEWEST), normalize, AuditSettings(vllm_version=NEWEST))
    return [f for f in auditor.run(invocations).findings if f.code == code]


def test_engine_left_on_its_default_port_collides_with_the_sidecar() -> None:
    default = api_server_port_at(NEWEST)
    assert default is not None
    text = pod(sidecar(f"--port={default}", "--vllm-port=8200"), [])
    [finding] = findings(text, "CN060")
    assert f"port {default}" in finding.message and "routing-proxy" in finding.message
    assert finding.severity.value == "error"
    # The documented layout: the engine moved to the port the sidecar forwards to.
    moved = pod(sidecar(f"--port={default}", "--vllm-port=8200"), ["--port", "8200"])
    assert findings(moved, "CN060") == []


def test_sidecar_defaults_collide_with_an_engine_on_its_listening_port() -> None:
    # No --port on the sidecar: it listens on its default 8000 (llm-d's main.go).
    assert findings(pod(sidecar("--vllm-port=8000"), ["--port", "8000"]), "CN060")
    assert findings(pod(sidecar("--vllm-port=8200"), ["--port", "8200"]), "CN060") == []


def test_a_declared_container_port_is_a_listener() -> None:
    # A metrics exporter declaring `ports: [{containerPort: 9400}]` (Pod API: Container.ports,
    # https://kubernetes.io/docs/reference/kubernetes-api/workload-resources/pod-v1/#ports).
    exporter = {"name": "metrics", "image": "exporter:1", "ports": [{"containerPort": 9400}]}
    assert findings(pod(exporter, ["--port", "9400"]), "CN060")
    assert findings(pod(exporter, ["--port", "8200"]), "CN060") == []


def test_sidecar_forwarding_to_a_port_the_engine_does_not_serve() -> None:
    [finding] = findings(pod(sidecar("--port=8000"), ["--port", "8200"]), "CN064")
    assert "8001" in finding.message and "8200" in finding.message
    assert finding.severity.value == "error"
    paired = pod(sidecar("--port=8000", "--vllm-port=8200"), ["--port", "8200"])
    assert findings(paired, "CN064") == []
    # The engine on vllm serve's own default while the sidecar forwards there.
    default = api_server_port_at(NEWEST)
    matched = pod(sidecar("--port=9000", f"--vllm-port={default}"), [])
    assert findings(matched, "CN064") == []
    assert findings(pod(sidecar("--port=9000"), []), "CN064")


def test_every_tabled_release_has_a_server_port_default() -> None:
    # The generator read `--port` from every wheel (an argparse default up to 0.10, a
    # dataclass field after): a release without one would quiet both rules there.
    assert all(api_server_port_at(v) for v in release_index().versions)


def engine_deployment(name: str, host_network: bool, *args: str) -> str:
    # PodSpec.hostNetwork (Pod API "Hostname and Name resolution" / "Hosts namespaces":
    # https://kubernetes.io/docs/reference/kubernetes-api/workload-resources/pod-v1/).
    nixl = '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'
    return f"""\
apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}}}
spec:
  template:
    spec:
      hostNetwork: {str(host_network).lower()}
      containers:
        - name: vllm
          image: vllm/vllm-openai:v{NEWEST}
          command: [vllm, serve, m, --kv-transfer-config, '{nixl}', {", ".join(args)}]
"""


def test_two_host_network_engines_on_default_ports_may_collide() -> None:
    both = engine_deployment("prefill", True) + "---\n" + engine_deployment("decode", True)
    found = findings(both, "CN067")
    assert len(found) == 2 and all(f.severity.value == "warning" for f in found)
    assert "hostNetwork" in found[0].message
    # One of them in its own network namespace: nothing shared.
    mixed = engine_deployment("prefill", True) + "---\n" + engine_deployment("decode", False)
    assert findings(mixed, "CN067") == []


def test_host_network_engines_with_their_own_ports_are_quiet() -> None:
    # Both the API port and the NIXL side channel moved for the decode engine.
    env = "          env: [{name: VLLM_NIXL_SIDE_CHANNEL_PORT, value: '7600'}]\n"
    decode = engine_deployment("decode", True, "--port", "8100").replace(
        "        - name: vllm\n", "        - name: vllm\n" + env
    )
    both = engine_deployment("prefill", True) + "---\n" + decode
    assert findings(both, "CN067") == []
    # Only the API port moved: the side channels still meet.
    moved = engine_deployment("decode", True, "--port", "8100")
    half = engine_deployment("prefill", True) + "---\n" + moved
    assert "side channel" in findings(half, "CN067")[0].message


@pytest.mark.network
@pytest.mark.timeout(900)
def test_listen_ports_match_the_wheels_at_the_oldest_and_newest_release() -> None:
    """scripts/gen_listen_ports.py --check re-reads two releases' wheels (cached or fetched)."""
    versions = release_index().versions
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO_ROOT / "scripts" / "gen_listen_ports.py"),
            "--check",
            "--versions",
            versions[0],
            versions[-1],
        ],
        capture_output=True,
        text=True,
        timeout=840,
    )
    if proc.returncode != 0 and "pip download" in proc.stderr and not pypi_reachable():
        pytest.skip("a wheel is not cached and pypi.org:443 is unreachable")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "no drift" in proc.stderr


def prefill_with_host(host_env: str) -> str:
    # llm-d's prefill pods set the side-channel host from the downward API
    # (https://github.com/llm-d/llm-d/tree/main/guides/pd-disaggregation); here the
    # variable as operators also write it, with a literal value.
    nixl = '{"kv_connector":"NixlConnector","kv_role":"kv_producer"}'
    return f"""\
apiVersion: apps/v1
kind: Deployment
metadata: {{name: prefill}}
spec:
  template:
    spec:
      containers:
        - name: vllm
          image: vllm/vllm-openai:v{NEWEST}
          command: [vllm, serve, m, --kv-transfer-config, '{nixl}']
          env: [{host_env}]
"""


def test_an_explicit_wildcard_or_loopback_side_channel_host_is_advertised_too() -> None:
    for host in ("0.0.0.0", "127.0.0.1"):
        text = prefill_with_host(f'{{name: VLLM_NIXL_SIDE_CHANNEL_HOST, value: "{host}"}}')
        [finding] = findings(text, "CN063")
        assert f"VLLM_NIXL_SIDE_CHANNEL_HOST={host}" in finding.message
    pod_ip = (
        "{name: VLLM_NIXL_SIDE_CHANNEL_HOST, valueFrom: {fieldRef: {fieldPath: status.podIP}}}"
    )
    assert findings(prefill_with_host(pod_ip), "CN063") == []
    routable = '{name: VLLM_NIXL_SIDE_CHANNEL_HOST, value: "prefill-0.prefill.svc"}'
    assert findings(prefill_with_host(routable), "CN063") == []
