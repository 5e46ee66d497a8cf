"""Adopting kvtool on a repository that already has findings, without editing its files:
a baseline (``--baseline``/``--update-baseline``), ``exclude``/``extend-exclude`` patterns
(settings and command line, as ruff spells them) and a file-wide
``# kvtool: ignore-file[...]`` comment (hadolint's ``global ignore``).

The removed flags are looked up in the release index, never typed in; the scripts are
``vllm serve`` command lines as vLLM documents them (https://docs.vllm.ai/en/latest/cli/serve/).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from kvtool.releases import available_versions
from tests.conftest import CliResult
from tests.release_facts import removed_value_flags

Cli = Callable[..., CliResult]


def _removed_flags(count: int) -> list[str]:
    names = removed_value_flags()
    assert len(names) >= count
    return names[:count]


NEWEST = available_versions()[-1]


def _serve(path: Path, *flags: str, head: str = "") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    words = " ".join(f"{flag} 4" for flag in flags)
    path.write_text(f"{head}vllm serve Qwen/Qwen3-8B {words}\n", encoding="utf-8")
    return path


def _codes(result: CliResult) -> list[tuple[str, str]]:
    findings = json.loads(result.stdout)["findings"]
    return sorted((Path(f["location"]["file"]).name, f["flag"]) for f in findings)


def test_a_baseline_hides_known_findings_and_reports_new_ones(
    kvtool_cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    old, new = _removed_flags(2)
    _serve(tmp_path / "deploy" / "a.sh", old)
    _serve(tmp_path / "deploy" / "b.sh", old)
    baseline = tmp_path / "kvtool-baseline.json"
    args = ("audit", "deploy", "--vllm-version", NEWEST, "--baseline", str(baseline))
    recorded = kvtool_cli(*args, "--update-baseline")
    assert recorded.exit_code == 0 and "recorded 2 finding(s)" in recorded.stderr
    clean = kvtool_cli(*args)
    assert clean.exit_code == 0 and "2 in the baseline" in clean.stderr
    # A line added above moves the finding: still known. A new flag is not.
    _serve(tmp_path / "deploy" / "a.sh", old, new, head="# moved down\n\n")
    after = kvtool_cli(*args, "--output-format", "json")
    assert after.exit_code == 1
    assert _codes(after) == [("a.sh", new)]
    assert json.loads(after.stdout)["summary"]["baselined"] == 2


def test_a_baseline_from_the_settings_and_a_missing_one(
    kvtool_cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (flag,) = _removed_flags(1)
    _serve(tmp_path / "a.sh", flag)
    (tmp_path / "kvtool.toml").write_text('baseline = "ci/baseline.json"\n', encoding="utf-8")
    missing = kvtool_cli("audit", "a.sh", "--vllm-version", NEWEST)
    assert missing.exit_code == 2 and "ci/baseline.json: no such file" in missing.stderr
    (tmp_path / "ci").mkdir()
    assert kvtool_cli("audit", "a.sh", "--vllm-version", NEWEST, "--update-baseline").exit_code == 0
    assert kvtool_cli("audit", "a.sh", "--vllm-version", NEWEST).exit_code == 0


def test_the_baseline_is_never_written_over_an_input(kvtool_cli: Cli, tmp_path: Path) -> None:
    (flag,) = _removed_flags(1)
    script = _serve(tmp_path / "a.sh", flag)
    before = script.read_bytes()
    result = kvtool_cli(
        "audit",
        str(script),
        "--vllm-version",
        NEWEST,
        "--baseline",
        str(script),
        "--update-baseline",
    )
    assert result.exit_code == 2 and script.read_bytes() == before


def test_exclude_patterns_from_settings_and_command_line(
    kvtool_cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (flag,) = _removed_flags(1)
    for name in ("deploy/a.sh", "vendor/b.sh", "legacy/old/c.sh"):
        _serve(tmp_path / name, flag)
    (tmp_path / "pyproject.toml").write_text(
        '[tool.kvtool]\nextend-exclude = ["vendor/"]\n', encoding="utf-8"
    )
    json_args = ("--vllm-version", NEWEST, "--output-format", "json")
    walked = kvtool_cli("audit", ".", *json_args)
    assert [name for name, _ in _codes(walked)] == ["a.sh", "c.sh"]
    more = kvtool_cli("audit", ".", *json_args, "--extend-exclude", "legacy/**")
    assert [name for name, _ in _codes(more)] == ["a.sh"]
    # --exclude replaces `exclude`; the file's `extend-exclude` still applies, as in ruff.
    replaced = kvtool_cli("audit", ".", *json_args, "--exclude", "deploy/")
    assert [name for name, _ in _codes(replaced)] == ["c.sh"]
    # A file named on the command line is read whatever the patterns say, as ruff does.
    named = kvtool_cli("audit", "vendor/b.sh", *json_args)
    assert [name for name, _ in _codes(named)] == ["b.sh"]


def test_a_file_wide_ignore_comment(kvtool_cli: Cli, tmp_path: Path) -> None:
    first, second = _removed_flags(2)
    head = "#!/bin/sh\n# kvtool: ignore-file[VG002] kept until the cluster moves\n"
    script = _serve(tmp_path / "a.sh", first, second, head=head)
    result = kvtool_cli("audit", str(script), "--vllm-version", NEWEST, "--output-format", "json")
    assert _codes(result) == [] and json.loads(result.stdout)["summary"]["suppressed"] == 2
    everything = _serve(tmp_path / "b.sh", first, head="# kvtool: ignore-file legacy\n")
    quiet = kvtool_cli("audit", str(everything), "--vllm-version", NEWEST)
    assert quiet.exit_code == 0
    # Other files keep their findings.
    other = _serve(tmp_path / "c.sh", first)
    both = kvtool_cli(
        "audit", str(script), str(other), "--vllm-version", NEWEST, "--output-format", "json"
    )
    assert _codes(both) == [("c.sh", first)]
