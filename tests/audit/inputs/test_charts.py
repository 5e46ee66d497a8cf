"""`kvtool audit CHART/`: rendered by `helm template` when a helm binary is on PATH, else by
the helm extra (helm-python-sdk, Helm's Go engine as a library; the test extras install
it), else read from the template text and counted as not audited (exit 1 unless
--allow-unrendered).

The chart is written here in the shape of the charts deployments use: a Deployment
template whose container image and serve args come from ``.Values`` with ``quote``, and
a flag inside ``{{- if .Values.x }}`` (vLLM's own chart,
https://github.com/vllm-project/vllm/blob/c66917853995af6fb7c37c5f11501eb3f32ef4cf/examples/online_serving/chart-helm/templates/deployment.yaml:
``image: "{{ ... .Values.image.repository }}:{{ ... .Values.image.tag }}"``, ``{{- if
.Values.image.command }}`` blocks; the same chart also keeps the whole command in
values, which the text alone cannot show).
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path
from typing import Any

import pytest

from kvtool.audit.inputs import helm_render
from kvtool.releases import available_versions, release_index

SWAP_SPACE = "--swap-space"

TEMPLATE = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: "{{ .Release.Name }}-vllm"
spec:
  replicas: {{ .Values.replicaCount }}
  selector:
    matchLabels:
      app: vllm
  template:
    metadata:
      labels:
        app: vllm
    spec:
      containers:
        - name: vllm
          image: "{{ .Values.image.repository }}:{{ .Values.image.tag }}"
          command: ["vllm", "serve"]
          args:
            - {{ .Values.model | quote }}
            - --max-model-len={{ .Values.maxModelLen }}
            {{- if .Values.swapSpace }}
            - --swap-space={{ .Values.swapSpace }}
            {{- end }}
          resources:
            {{- toYaml .Values.resources | nindent 12 }}
"""


def _chart(root: Path, tag: str, *, swap: int | None = None) -> Path:
    chart = root / "llm"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: llm\nversion: 0.1.0\n")
    values = (
        "replicaCount: 1\n"
        f"image:\n  repository: vllm/vllm-openai\n  tag: {tag}\n"
        "model: facebook/opt-125m\nmaxModelLen: 4096\n"
        "resources:\n  limits:\n    nvidia.com/gpu: 1\n"
    )
    if swap is not None:
        values += f"swapSpace: {swap}\n"
    (chart / "values.yaml").write_text(values)
    (chart / "templates" / "deployment.yaml").write_text(TEMPLATE)
    return chart


@pytest.fixture
def no_helm_binary(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A PATH without helm (the machine may have one)."""
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    helm_render._render_with_binary.cache_clear()


@pytest.fixture
def no_renderer(no_helm_binary: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Neither renderer: the helm extra hidden as if it were not installed."""
    monkeypatch.setattr(helm_render, "_sdk_available", lambda: False)


def _json(kvtool_cli: Any, *args: str) -> tuple[int, dict[str, Any]]:  # type: ignore[misc]
    result = kvtool_cli("audit", *args, "--output-format", "json")
    assert result.exit_code in (0, 1), result.stderr
    return result.exit_code, json.loads(result.stdout)


def _removed_at() -> tuple[str, str]:
    """(a release that has --swap-space, the release that removed it)."""
    gone = release_index().flags[SWAP_SPACE].gone_at
    assert gone is not None
    versions = available_versions()
    return versions[versions.index(gone) - 1], gone


def test_the_helm_extra_renders_the_chart_with_its_default_values(
    tmp_path: Path, kvtool_cli: Any, no_helm_binary: None
) -> None:
    # The test extras install helm-python-sdk: this path runs, it is not skipped.
    assert helm_render.renderer() == "helm-python-sdk"
    _, gone = _removed_at()
    chart = _chart(tmp_path, f"v{gone}", swap=4)
    code, report = _json(kvtool_cli, str(chart))
    (invocation,) = report["invocations"]
    assert invocation["file"].endswith("templates/deployment.yaml#rendered")
    assert invocation["target"]["origin"] == f"image tag vllm/vllm-openai:v{gone}"
    # The value from values.yaml reached the command: the if-branch was rendered.
    assert any(f["code"] == "VG002" and f["flag"] == SWAP_SPACE for f in report["findings"])
    assert code == 1 and report["summary"]["unrendered"] == 0


def test_a_helm_binary_on_path_renders_the_chart(
    tmp_path: Path, kvtool_cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A `helm` on PATH that renders through Helm's own engine and prints what `helm
    # template` prints (one `# Source:` document per template), recording its argv.
    bin_dir, calls = tmp_path / "bin", tmp_path / "calls.txt"
    bin_dir.mkdir()
    helm = bin_dir / "helm"
    helm.write_text(
        f"#!{sys.executable}\n"
        "import sys\n"
        "from helm_python.chart import Chart\n"
        f"open({str(calls)!r}, 'a').write(' '.join(sys.argv[1:]) + '\\n')\n"
        "_, name, path = sys.argv[1:4]\n"
        "for key, text in sorted(Chart.load(path).render(name=name).items()):\n"
        "    if text.strip():\n"
        "        print('---'); print('# Source: ' + key); print(text)\n"
    )
    helm.chmod(helm.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    helm_render._render_with_binary.cache_clear()
    assert helm_render.renderer() == "helm"
    has, _ = _removed_at()
    chart = _chart(tmp_path, f"v{has}", swap=4)
    _, report = _json(kvtool_cli, str(chart))
    assert calls.read_text().split() == ["template", helm_render.RELEASE_NAME, str(chart)]
    (invocation,) = report["invocations"]
    assert invocation["label"].startswith(f"{chart}/templates/deployment.yaml#rendered: ")
    assert f"Deployment/{helm_render.RELEASE_NAME}-vllm" in invocation["label"]
    assert invocation["target"]["vllm_version"] == has
    assert not any(f["code"] == "VG002" for f in report["findings"])
    assert report["summary"]["unrendered"] == 0


def test_without_a_renderer_the_server_is_found_in_the_text_and_the_chart_fails_the_run(
    tmp_path: Path, kvtool_cli: Any, no_renderer: None
) -> None:
    assert helm_render.renderer() is None
    newest = available_versions()[-1]
    chart = _chart(tmp_path, f"v{newest}")  # swapSpace unset: its branch is left out
    code, report = _json(kvtool_cli, str(chart))
    (invocation,) = report["invocations"]
    # The default values that a plain action names were applied, the rest named.
    assert invocation["target"]["origin"] == f"image tag vllm/vllm-openai:v{newest}"
    assert f"Deployment/{helm_render.RELEASE_NAME}-vllm" in invocation["label"]
    assert any(".Values.resources" in note for note in invocation["notes"])
    assert not any(f["flag"] == SWAP_SPACE for f in report["findings"])
    (unrendered,) = [s for s in report["skipped"] if s["unrendered"]]
    assert unrendered["file"].endswith("templates/deployment.yaml")
    assert "no helm binary on PATH and no helm extra" in unrendered["reason"]
    assert report["summary"]["unrendered"] == 1 and report["summary"]["error"] == 0
    assert code == 1  # never a clean pass
    text = kvtool_cli("audit", str(chart))
    assert "1 chart template(s) not rendered: not audited" in text.stderr
    allowed = kvtool_cli("audit", str(chart), "--allow-unrendered")
    assert allowed.exit_code == 0, allowed.stdout + allowed.stderr


def test_a_chart_whose_command_lives_in_values_is_not_a_silent_pass(
    tmp_path: Path, kvtool_cli: Any, no_renderer: None
) -> None:
    # vLLM's chart keeps the command in values (`{{- toYaml . | nindent 10 }}` under
    # `{{- with .Values.image.command }}`): without a renderer nothing shows a server.
    chart = tmp_path / "chart-helm"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: chart-helm\nversion: 0.0.1\n")
    (chart / "values.yaml").write_text(
        "image:\n  repository: vllm/vllm-openai\n  tag: latest\n"
        '  command: ["vllm", "serve", "/data/", "--served-model-name", "opt-125m"]\n'
    )
    (chart / "templates" / "deployment.yaml").write_text(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: x\nspec:\n  template:\n"
        "    spec:\n      containers:\n        - name: vllm\n"
        '          image: "{{ .Values.image.repository }}:{{ .Values.image.tag }}"\n'
        "          {{- if .Values.image.command }}\n          command :\n"
        "            {{- with .Values.image.command }}\n"
        "            {{- toYaml . | nindent 10 }}\n"
        "            {{- end }}\n          {{- end }}\n"
    )
    result = kvtool_cli("audit", str(chart / "templates" / "deployment.yaml"))
    assert result.exit_code == 1, result.stdout + result.stderr
    assert "1 chart template(s) not rendered" in result.stderr


def test_a_chart_helm_refuses_is_read_from_its_text_and_says_why(
    tmp_path: Path, kvtool_cli: Any, no_helm_binary: None
) -> None:
    newest = available_versions()[-1]
    chart = _chart(tmp_path, f"v{newest}")
    broken = chart / "templates" / "deployment.yaml"
    broken.write_text(TEMPLATE.replace("{{ .Values.replicaCount }}", "{{ .Values.replicaCount"))
    code, report = _json(kvtool_cli, str(chart))
    (unrendered,) = [s for s in report["skipped"] if s["unrendered"]]
    assert "helm could not render the chart" in unrendered["reason"]
    assert code == 1


def test_unrendered_text_keeps_lines_and_names_what_it_could_not_apply() -> None:
    text, unapplied = helm_render.unrendered_text(TEMPLATE, {"model": "m", "image": {}})
    assert len(text.split("\n")) == len(TEMPLATE.split("\n"))
    assert '- "m"' in text and "--max-model-len=\n" in text  # unset: Helm prints nothing
    assert "${VALUES_RESOURCES}" not in text  # an action-only line is blank
    assert unapplied == (".Values.resources",)
    assert helm_render.split_sources(
        "---\n# Source: llm/templates/a.yaml\nkind: A\n---\n# Source: llm/templates/b.yaml\n"
        "kind: B\n---\n# Source: llm/templates/a.yaml\nkind: C\n"
    ) == {
        "llm/templates/a.yaml": "# Source: llm/templates/a.yaml\nkind: A\n---\n"
        "# Source: llm/templates/a.yaml\nkind: C\n",
        "llm/templates/b.yaml": "# Source: llm/templates/b.yaml\nkind: B\n",
    }


def test_a_rendered_serving_runtime_annotation_names_the_release(
    tmp_path: Path, kvtool_cli: Any, no_helm_binary: None
) -> None:
    # A chart that templates Open Data Hub's runtime annotation
    # (https://github.com/opendatahub-io/odh-model-controller/blob/0c3a7c21766674214c4b9943634c180976ebe183/config/runtimes/vllm-cuda-template.yaml
    # writes `opendatahub.io/runtime-version: 'v0.9.1.0'` on the ServingRuntime).
    has, _ = _removed_at()
    chart = tmp_path / "runtime"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: runtime\nversion: 0.1.0\n")
    (chart / "values.yaml").write_text(f"runtimeVersion: v{has}.0\nimage: quay.io/org/vllm\n")
    (chart / "templates" / "runtime.yaml").write_text(
        "apiVersion: serving.kserve.io/v1alpha1\nkind: ServingRuntime\nmetadata:\n"
        "  name: vllm-runtime\n  annotations:\n"
        "    opendatahub.io/runtime-version: {{ .Values.runtimeVersion | quote }}\n"
        "spec:\n  containers:\n    - name: kserve-container\n"
        "      image: {{ .Values.image }}\n"
        "      command: [python, -m, vllm.entrypoints.openai.api_server]\n"
        f'      args: ["--model=/mnt/models", "{SWAP_SPACE}=4"]\n'
    )
    _, report = _json(kvtool_cli, str(chart))
    (invocation,) = report["invocations"]
    assert (invocation["target"]["vllm_version"], invocation["target"]["source"]) == (
        has,
        "annotation",
    )
    assert not any(f["flag"] == SWAP_SPACE for f in report["findings"])


# Arguments as a loop over values, as charts write them: a list
# (`{{- range .Values.extraArgs }}` / `- {{ . | quote }}`, vLLM's chart-helm
# deployment.yaml with its `extraArgs`) and a map (`{{- range $key, $value := ... }}`,
# https://github.com/castai/helm-charts charts/castai-hosted-model child chart vllm).
LOOP_TEMPLATE = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: "{{ .Release.Name }}-vllm"
spec:
  template:
    spec:
      containers:
        - name: vllm
          image: "vllm/vllm-openai:{{ .Values.tag }}"
          command: ["vllm", "serve"]
          args:
            - {{ .Values.model | quote }}
            {{- range .Values.extraArgs }}
            - {{ . | quote }}
            {{- end }}
            {{- range $key, $value := .Values.engine }}
            - --{{ $key }}={{ $value }}
            {{- end }}
          ports:
            - containerPort: 8000
"""


def test_a_loop_over_default_values_is_written_out_without_a_renderer(
    tmp_path: Path, kvtool_cli: Any, no_renderer: None
) -> None:
    _, gone = _removed_at()
    chart = tmp_path / "loop"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: loop\nversion: 0.1.0\n")
    (chart / "values.yaml").write_text(
        f"tag: v{gone}\nmodel: facebook/opt-125m\n"
        f"extraArgs: [--enforce-eager, {SWAP_SPACE}, '4']\n"
        "engine: {max-model-len: 4096, gpu-memory-utilization: 0.8}\n"
    )
    (chart / "templates" / "deployment.yaml").write_text(LOOP_TEMPLATE)
    _, report = _json(kvtool_cli, str(chart))
    assert len(report["invocations"]) == 1
    (removed,) = [f for f in report["findings"] if f["flag"] == SWAP_SPACE]
    # the finding points at the loop's body line in the template
    body_line = LOOP_TEMPLATE.splitlines().index("            - {{ . | quote }}") + 1
    assert removed["code"] == "VG002" and removed["location"]["line"] == body_line
    # no other error: the map's flags (--gpu-memory-utilization=0.8 ...) are valid there
    errors = {f["code"] for f in report["findings"] if f["severity"] == "error"}
    assert errors <= {"VG002", "SC001"}, errors
    # the map's items, in key order, reached the command (no runtime placeholder left)
    (template,) = [s for s in report["skipped"] if s["unrendered"]]
    assert "values not applied: none" in template["reason"], template["reason"]
