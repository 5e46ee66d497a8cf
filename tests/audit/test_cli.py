"""``kvtool audit`` through the CLI: exit codes, formats, settings, suppressions, fixes."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import jsonschema
import pytest

from tests.conftest import REPO_ROOT, CliResult

REPORT_SCHEMA = REPO_ROOT / "docs" / "schemas" / "audit.schema.json"

Cli = Callable[..., CliResult]

EXAMPLES = REPO_ROOT / "examples"
SARIF_SCHEMA = REPO_ROOT / "tests" / "data" / "sarif-schema-2.1.0.json"

SCRIPT = """\
#!/bin/sh
vllm serve meta-llama/Llama-3.1-8B-Instruct \\
  --kv-offloading-size 100 \\
  --calculate-kv-scales \\
  --disable-hybrid-kv-cache-manager \\
  --port 8000
"""


@pytest.fixture
def script(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A serve script in an empty working directory (no settings file above it)."""
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "serve.sh"
    path.write_text(SCRIPT)
    return path


def test_clean_example_exits_0(kvtool_cli: Cli) -> None:
    result = kvtool_cli(
        "audit", str(EXAMPLES / "native-offload-clean.sh"), "--vllm-version", "0.32.0"
    )
    assert result.exit_code == 0, result.stdout + result.stderr
    assert "0 errors" in result.stderr


def test_findings_exit_1_and_text_report_names_code_location_and_rule(
    kvtool_cli, script: Path
) -> None:
    result = kvtool_cli("audit", str(script), "--vllm-version", "0.32.0")
    assert result.exit_code == 1
    assert f"{script}:4:3: VG002 error" in result.stdout
    assert "[removed-flag]" in result.stdout
    assert "vLLM 0.32.0 (--vllm-version)" in result.stderr  # where the release was read


def test_exit_zero_and_fail_on(kvtool_cli: Cli, script: Path) -> None:
    assert (
        kvtool_cli("audit", str(script), "--vllm-version", "0.32.0", "--exit-zero").exit_code == 0
    )
    only_warning = ("--select", "CN010")
    assert (
        kvtool_cli("audit", str(script), "--vllm-version", "0.32.0", *only_warning).exit_code == 0
    )
    assert (
        kvtool_cli(
            "audit", str(script), "--vllm-version", "0.32.0", *only_warning, "--fail-on", "warning"
        ).exit_code
        == 1
    )


def test_bad_input_exits_2_with_one_line_and_exit_zero_does_not_hide_it(
    kvtool_cli, tmp_path: Path
) -> None:
    missing = kvtool_cli("audit", str(tmp_path / "nope.sh"), "--exit-zero")
    assert missing.exit_code == 2
    assert missing.stderr.startswith("kvtool: error:") and "nope.sh" in missing.stderr
    bad_version = kvtool_cli(
        "audit", str(EXAMPLES / "native-offload-clean.sh"), "--vllm-version", "banana"
    )
    assert bad_version.exit_code == 2 and "banana" in bad_version.stderr
    bad_rule = kvtool_cli("audit", str(EXAMPLES / "native-offload-clean.sh"), "--select", "NOPE1")
    assert bad_rule.exit_code == 2 and "NOPE1" in bad_rule.stderr
    nothing = kvtool_cli("audit")
    assert nothing.exit_code == 2 and "nothing to audit" in nothing.stderr


def test_argv_after_double_dash(kvtool_cli: Cli) -> None:
    result = kvtool_cli(
        "audit", "--vllm-version", "0.28.0", "--output-format", "json",
        "--", "vllm", "serve", "m", "--calculate-kv-scales",
    )  # fmt: skip
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert [f["code"] for f in report["findings"]] == ["VG002"]
    assert report["invocations"][0]["kind"] == "argv"


def test_select_and_ignore_accept_names(kvtool_cli: Cli, script: Path) -> None:
    def found(*extra: str) -> set[str]:
        result = kvtool_cli(
            "audit", str(script), "--vllm-version", "0.32.0", "--output-format", "json", *extra
        )
        return {f["code"] for f in json.loads(result.stdout)["findings"]}

    assert found("--select", "removed-flag") == {"VG002"}
    assert "VG002" not in found("--ignore", "removed-flag")
    assert found("--select", "CN", "--ignore", "CN010") == set()


def test_json_report_is_versioned_and_carries_every_documented_field(
    kvtool_cli, script: Path
) -> None:
    result = kvtool_cli("audit", str(script), "--vllm-version", "0.32.0", "--output-format", "json")
    report = json.loads(result.stdout)
    assert report["schema_version"] == 1
    assert report["target"] == {
        "vllm_version": "0.32.0",
        "source": "flag",
        "warning": None,
        "origin": "--vllm-version",
        "exact": True,
    }
    vg002 = next(f for f in report["findings"] if f["code"] == "VG002")
    assert vg002["name"] == "removed-flag" and vg002["severity"] == "error"
    assert vg002["flag"] == "--calculate-kv-scales"
    assert vg002["location"]["file"] == str(script) and vg002["location"]["line"] == 4
    assert vg002["fix"]["applicability"] == "safe"
    assert vg002["references"]
    assert report["summary"]["error"] == sum(f["severity"] == "error" for f in report["findings"])
    schema = json.loads(REPORT_SCHEMA.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator(schema).validate(report)


def test_json_schema_rejects_a_report_missing_a_documented_field(kvtool_cli, script: Path) -> None:
    result = kvtool_cli("audit", str(script), "--vllm-version", "0.32.0", "--output-format", "json")
    report = json.loads(result.stdout)
    del report["findings"][0]["fix"]
    report["findings"][1]["severity"] = "fatal"
    schema = json.loads(REPORT_SCHEMA.read_text(encoding="utf-8"))
    problems = {
        e.message for e in jsonschema.Draft202012Validator(schema).iter_errors(report)
    }
    assert "'fix' is a required property" in problems
    assert any("'fatal' is not one of" in p for p in problems)


def test_sarif_validates_against_the_sarif_2_1_0_schema(kvtool_cli: Cli, script: Path) -> None:
    argv_run = kvtool_cli(
        "audit",
        "--vllm-version",
        "0.32.0",
        "--output-format",
        "sarif",
        "--",
        "vllm",
        "serve",
        "m",
        "--swap-space",
        "4",
    )
    file_run = kvtool_cli(
        "audit", str(script), "--vllm-version", "0.32.0", "--output-format", "sarif"
    )
    schema = json.loads(SARIF_SCHEMA.read_text())
    for result in (argv_run, file_run):
        document = json.loads(result.stdout)
        jsonschema.Draft4Validator(schema).validate(document)
    results = json.loads(file_run.stdout)["runs"][0]["results"]
    located = next(r for r in results if r["ruleId"] == "VG002")
    assert located["locations"][0]["physicalLocation"]["region"]["startLine"] == 4
    # The script lies in the working directory: a relative URI GitHub can place.
    assert located["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "serve.sh"
    unlocated = json.loads(argv_run.stdout)["runs"][0]["results"]
    assert unlocated and all("locations" not in r for r in unlocated)  # bare argv: no file
    rules = json.loads(file_run.stdout)["runs"][0]["tool"]["driver"]["rules"]
    assert {r["id"] for r in rules} >= {"VG002", "CN010", "KV000"}


def test_sarif_uri_outside_the_working_directory_is_a_file_uri(
    kvtool_cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "deploy scripts"
    folder.mkdir()
    script = folder / "serve.sh"
    script.write_text(SCRIPT)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    result = kvtool_cli(
        "audit", str(script), "--vllm-version", "0.32.0", "--output-format", "sarif"
    )
    results = json.loads(result.stdout)["runs"][0]["results"]
    uris = {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in results}
    assert uris == {script.as_uri()}
    assert "%20" in script.as_uri()  # the space is percent-encoded, as a URI requires


def test_github_annotations(kvtool_cli: Cli, script: Path) -> None:
    result = kvtool_cli(
        "audit", str(script), "--vllm-version", "0.32.0", "--output-format", "github"
    )
    lines = result.stdout.splitlines()
    assert f"::error file={script},line=4,col=3,title=VG002 removed-flag::" in "\n".join(lines)
    assert all(line.startswith(("::error ", "::warning ", "::notice ")) for line in lines)


def test_output_file_gets_the_report_and_stdout_stays_empty(
    kvtool_cli, script: Path, tmp_path: Path
) -> None:
    out = tmp_path / "report.json"
    result = kvtool_cli(
        "audit", str(script), "--vllm-version", "0.32.0", "--output-format", "json", "-o", str(out)
    )
    assert result.stdout == ""
    assert json.loads(out.read_text())["schema_version"] == 1


def test_settings_file_ignore_severity_and_target(kvtool_cli: Cli, script: Path) -> None:
    (script.parent / "kvtool.toml").write_text(
        'vllm-version = "0.28.0"\n[audit]\nignore = ["CN010"]\n'
        'severity = {removed-flag = "warning"}\n'
    )
    result = kvtool_cli("audit", str(script), "--output-format", "json")
    report = json.loads(result.stdout)
    assert report["target"]["vllm_version"] == "0.28.0" and report["target"]["source"] == "settings"
    codes = {f["code"]: f["severity"] for f in report["findings"]}
    assert "CN010" not in codes and codes["VG002"] == "warning"
    assert result.exit_code == 0  # nothing at error level is left
    shown = json.loads(kvtool_cli("audit", "--show-settings").stdout)
    assert shown["ignore"] == ["CN010"] and shown["source"].endswith("kvtool.toml")


def test_pyproject_tool_kvtool_and_per_file_ignores(kvtool_cli: Cli, script: Path) -> None:
    (script.parent / "pyproject.toml").write_text(
        '[tool.kvtool.audit]\nper-file-ignores = {"*.sh" = ["VG002"]}\n'
    )
    result = kvtool_cli("audit", str(script), "--vllm-version", "0.32.0", "--output-format", "json")
    assert "VG002" not in {f["code"] for f in json.loads(result.stdout)["findings"]}


def test_per_file_ignores_match_paths_relative_to_the_settings_file(
    kvtool_cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "kvtool.toml").write_text('per-file-ignores = {"deploy/*.sh" = ["VG002"]}\n')
    deploy = tmp_path / "deploy"
    deploy.mkdir()
    (deploy / "serve.sh").write_text(SCRIPT)
    (tmp_path / "serve.sh").write_text(SCRIPT)
    monkeypatch.chdir(deploy)  # the settings file is found above; the path given is bare

    def codes(path: str) -> set[str]:
        out = kvtool_cli("audit", path, "--vllm-version", "0.32.0", "--output-format", "json")
        return {f["code"] for f in json.loads(out.stdout)["findings"]}

    assert "VG002" not in codes("serve.sh")
    assert "VG002" in codes("../serve.sh")  # outside deploy/: still reported


def test_unknown_setting_is_a_usage_error(kvtool_cli: Cli, script: Path) -> None:
    (script.parent / "kvtool.toml").write_text("selct = ['VG']\n")
    result = kvtool_cli("audit", str(script))
    assert result.exit_code == 2
    assert "selct" in result.stderr and "kvtool.toml" in result.stderr


def test_a_bad_version_in_settings_names_the_settings_file(kvtool_cli: Cli, script: Path) -> None:
    settings = script.parent / "kvtool.toml"
    settings.write_text('vllm-version = "abc"\n')
    result = kvtool_cli("audit", str(script))
    assert result.exit_code == 2
    assert f"{settings}: vllm-version:" in result.stderr
    assert "--vllm-version" not in result.stderr
    # A release older than every table is audited against the oldest one, with a warning.
    settings.write_text('vllm-version = "0.1.0"\n')
    old = kvtool_cli("audit", str(script))
    assert old.exit_code != 2 and "older than the oldest release table" in old.stderr
    flag = kvtool_cli("audit", str(script), "--vllm-version", "abc")
    assert flag.exit_code == 2 and "--vllm-version: 'abc'" in flag.stderr


def test_inline_suppressions_unused_and_missing_reasons(kvtool_cli: Cli, script: Path) -> None:
    # In shell a comment cannot sit inside a continued command: one above the command
    # covers the whole command, one at the end of its last line covers that line.
    script.write_text(
        SCRIPT.replace(
            "vllm serve", "# kvtool: ignore[VG002,XX123] gone next sprint\nvllm serve"
        ).replace("--port 8000", "--port 8000  # kvtool: ignore[SZ001]")
    )
    report = json.loads(
        kvtool_cli(
            "audit", str(script), "--vllm-version", "0.32.0", "--output-format", "json"
        ).stdout
    )
    found = [(f["code"], f["location"]["line"]) for f in report["findings"]]
    assert "VG002" not in {code for code, _ in found}
    assert ("KV002", 2) in found  # XX123 is no rule
    assert ("KV000", 7) in found  # SZ001 suppression matched nothing
    assert ("KV001", 7) in found  # ... and gives no reason
    assert report["summary"]["suppressed"] == 1
    everything = kvtool_cli(
        "audit",
        str(script),
        "--vllm-version",
        "0.32.0",
        "--output-format",
        "json",
        "--no-suppressions",
    )
    codes = {f["code"] for f in json.loads(everything.stdout)["findings"]}
    assert "VG002" in codes and not codes & {"KV000", "KV001", "KV002"}


def test_kubernetes_annotation_suppresses_the_whole_invocation(
    kvtool_cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  annotations:\n"
        '    kvtool.io/ignore: "VG002=removing with the 0.33 rollout"\n'
        "spec:\n  containers:\n    - name: vllm\n      image: vllm/vllm-openai:v0.32.0\n"
        '      command: ["vllm", "serve", "m", "--calculate-kv-scales"]\n'
    )
    report = json.loads(kvtool_cli("audit", str(manifest), "--output-format", "json").stdout)
    assert report["target"] == {
        "vllm_version": "0.32.0",
        "source": "image",
        "warning": None,
        "origin": "image tag vllm/vllm-openai:v0.32.0",
        "exact": True,
    }
    assert report["findings"] == [] and report["summary"]["suppressed"] == 1


def test_diff_shows_safe_fixes_without_writing(kvtool_cli: Cli, script: Path) -> None:
    result = kvtool_cli("audit", str(script), "--vllm-version", "0.32.0", "--diff")
    assert "-  --calculate-kv-scales \\" in result.stdout
    assert "-  --disable-hybrid-kv-cache-manager \\" in result.stdout
    assert "-  --kv-offloading-size 100" not in result.stdout  # unsafe fixes need --unsafe-fixes
    assert script.read_text() == SCRIPT
    assert "Would apply 2 fix(es)." in result.stderr


def test_fix_rewrites_the_script_and_reaudits_clean_for_fixed_rules(
    kvtool_cli, script: Path
) -> None:
    result = kvtool_cli("audit", str(script), "--vllm-version", "0.32.0", "--fix")
    assert result.exit_code == 0, result.stdout + result.stderr
    assert "Applied 2 fix(es)." in result.stderr
    fixed = script.read_text()
    assert "--calculate-kv-scales" not in fixed and "--disable-hybrid-kv-cache-manager" not in fixed
    assert fixed.splitlines()[-1] == "  --port 8000"
    after = kvtool_cli("audit", str(script), "--vllm-version", "0.32.0", "--output-format", "json")
    assert not {"VG002", "CN010"} & {f["code"] for f in json.loads(after.stdout)["findings"]}


def test_fix_on_argv_prints_the_fixed_command(kvtool_cli: Cli) -> None:
    result = kvtool_cli(
        "audit",
        "--vllm-version",
        "0.32.0",
        "--diff",
        "--",
        "vllm",
        "serve",
        "m",
        "--mamba-cache-mode",
        "all",
    )
    assert "+vllm serve m --mamba-cache-mode align" in result.stdout


def test_manifest_fixes_are_written_with_fix_and_only_shown_with_diff(
    kvtool_cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    manifest = tmp_path / "k8s.yaml"
    shutil.copy(EXAMPLES / "k8s-deployment.yaml", manifest)
    before = manifest.read_text()
    preview = kvtool_cli("audit", str(manifest), "--diff")
    assert manifest.read_text() == before
    assert "-                  --calculate-kv-scales" in preview.stdout
    fixed = kvtool_cli("audit", str(manifest), "--fix", "--output-format", "json")
    assert "--calculate-kv-scales" not in manifest.read_text()
    # Only the removed flag's lines changed; the rest of the manifest is byte-identical.
    assert manifest.read_text() == before.replace(
        " \\\n                  --calculate-kv-scales", ""
    )
    # stdout holds only the report; the applied diff goes to stderr with the summary.
    assert "VG002" not in {f["code"] for f in json.loads(fixed.stdout)["findings"]}
    assert "-                  --calculate-kv-scales" in fixed.stderr
    assert "Applied 1 fix(es)." in fixed.stderr


def test_output_format_from_the_environment(
    kvtool_cli: Cli, script: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KVTOOL_OUTPUT_FORMAT", "github")
    result = kvtool_cli("audit", str(script), "--vllm-version", "0.32.0")
    assert result.stdout.startswith("::")


def test_vllm_version_flag_beats_the_settings_file(kvtool_cli: Cli, script: Path) -> None:
    (script.parent / "kvtool.toml").write_text('vllm-version = "0.28.0"\n')
    result = kvtool_cli("audit", str(script), "--vllm-version", "0.32.0", "--output-format", "json")
    assert json.loads(result.stdout)["target"]["vllm_version"] == "0.32.0"
    assert json.loads(result.stdout)["target"]["source"] == "flag"


def test_image_verdicts_feed_the_image_rule(kvtool_cli: Cli, tmp_path: Path) -> None:
    from kvtool.image.model import (
        Connector,
        ConnectorVerdict,
        InspectionReport,
        StepOutcome,
        Verdict,
    )

    report = InspectionReport(
        build_flag_step=StepOutcome(status="ran"),
        runtime_step=StepOutcome(status="ran"),
        verdicts=[
            ConnectorVerdict(
                connector=Connector.nixl, verdict=Verdict.broken, reason="import fails"
            ),
        ],
        exit_code=1,
    )
    verdicts = tmp_path / "image.json"
    verdicts.write_text(report.model_dump_json())
    argv = ["--", "vllm", "serve", "m", "--kv-transfer-config", '{"kv_connector":"NixlConnector"}']
    common = ("audit", "--vllm-version", "0.32.0", "--output-format", "json")
    with_verdicts = kvtool_cli(*common, "--image-verdicts", str(verdicts), *argv)
    assert "IM001" in {f["code"] for f in json.loads(with_verdicts.stdout)["findings"]}
    without = kvtool_cli(*common, *argv)
    assert "IM001" not in {f["code"] for f in json.loads(without.stdout)["findings"]}
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    assert kvtool_cli(*common, "--image-verdicts", str(bad), *argv).exit_code == 2


def test_argv_is_found_even_next_to_a_folder_named_vllm(kvtool_cli: Cli, script: Path) -> None:
    (script.parent / "vllm").mkdir()  # e.g. auditing from inside a vLLM checkout
    result = kvtool_cli(
        "audit", "--vllm-version", "0.28.0", "--output-format", "json",
        "--", "vllm", "serve", "m", "--calculate-kv-scales",
    )  # fmt: skip
    assert [f["code"] for f in json.loads(result.stdout)["findings"]] == ["VG002"]


def test_a_file_named_twice_is_audited_once(kvtool_cli: Cli, script: Path) -> None:
    once = kvtool_cli("audit", str(script), "--vllm-version", "0.32.0", "--output-format", "json")
    twice = kvtool_cli(
        "audit", str(script), "./serve.sh", "--vllm-version", "0.32.0", "--output-format", "json"
    )
    assert json.loads(twice.stdout)["findings"] == json.loads(once.stdout)["findings"]
