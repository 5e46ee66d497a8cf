"""Settings discovery and validation (ruff-like: closest file wins, CLI beats file)."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from kvtool.audit.engine import selection_for
from kvtool.audit.model import Severity
from kvtool.audit.settings import AuditSettings, apply_cli, load_settings
from kvtool.errors import KvtoolError


def test_no_file_gives_defaults(tmp_path: Path) -> None:
    settings = load_settings(tmp_path)
    assert settings == AuditSettings()
    assert settings.fail_on is Severity.error and settings.select == ("ALL",)


def test_closest_directory_wins_and_dot_file_beats_plain_and_pyproject(tmp_path: Path) -> None:
    (tmp_path / "kvtool.toml").write_text('vllm-version = "0.30.0"\n')
    nested = tmp_path / "deploy" / "prod"
    nested.mkdir(parents=True)
    assert load_settings(nested).vllm_version == "0.30.0"  # found walking up
    (nested / "pyproject.toml").write_text('[tool.kvtool]\nvllm-version = "0.31.0"\n')
    assert load_settings(nested).vllm_version == "0.31.0"
    (nested / "kvtool.toml").write_text('vllm-version = "0.32.0"\n')
    (nested / ".kvtool.toml").write_text('vllm-version = "0.33.0"\n')
    assert load_settings(nested).vllm_version == "0.33.0"


def test_pyproject_without_a_kvtool_table_is_skipped(tmp_path: Path) -> None:
    (tmp_path / "kvtool.toml").write_text('fail-on = "warning"\n')
    child = tmp_path / "pkg"
    child.mkdir()
    (child / "pyproject.toml").write_text("[tool.ruff]\nline-length = 100\n")
    assert load_settings(child).fail_on is Severity.warning


# Every TOML spelling of a [tool.kvtool] table (https://toml.io/en/v1.0.0#keys: dotted,
# quoted and inline forms), each read as the same settings.
@pytest.mark.parametrize(
    "text",
    [
        '[tool.kvtool]\nvllm-version = "0.31.0"\n',
        '[ "tool" . \'kvtool\' ] # ours\nvllm-version = "0.31.0"\n',
        '[tool.kvtool.audit]\nvllm-version = "0.31.0"\n',
        '[tool]\nkvtool.vllm-version = "0.31.0"\n',
        '[tool]\nkvtool = { vllm-version = "0.31.0" }\n',
        'tool.kvtool.vllm-version = "0.31.0"\n',
        'tool = { kvtool = { vllm-version = "0.31.0" } }\n',
        '[tool."kv\\u0074ool"]\nvllm-version = "0.31.0"\n',
        'description = """\n[x]\n"""\n[tool]\nkvtool.vllm-version = "0.31.0"\n',
    ],
)
def test_every_spelling_of_a_pyproject_kvtool_table_is_read(tmp_path: Path, text: str) -> None:
    (tmp_path / "pyproject.toml").write_text(f'{text}[project]\nname = "demo"\n')
    assert load_settings(tmp_path).vllm_version == "0.31.0"


def test_a_pyproject_naming_kvtool_only_as_metadata_is_passed_over_unparsed(
    tmp_path: Path,
) -> None:
    """kvtool's own pyproject.toml names it as the project, a script and a package; none of
    that is a settings table, and a broken file that never configures kvtool is not an
    audit error (it is not even parsed)."""
    (tmp_path / "kvtool.toml").write_text('fail-on = "warning"\n')
    child = tmp_path / "pkg"
    child.mkdir()
    (child / "pyproject.toml").write_text(
        '[project]\nname = "kvtool"\n[project.scripts]\nkvtool = "kvtool.cli:main"\n'
        '[tool.hatch]\npackages = ["kvtool"]\nbroken = [\n'
    )
    assert load_settings(child).fail_on is Severity.warning
    (child / "pyproject.toml").write_text("[tool.kvtool]\nbroken = [\n")
    with pytest.raises(KvtoolError, match="not valid TOML"):
        load_settings(child)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("fail-on = 'fatal'\n", "fail-on"),
        ("host-ram-gib = -1\n", "host-ram-gib"),
        ("vllm-version = 0.32\n", "vllm-version"),
        ("[audit]\nignor = ['VG']\n", "ignor"),
        ("not toml [", "not valid TOML"),
    ],
)
def test_bad_settings_name_the_key_and_file(tmp_path: Path, text: str, needle: str) -> None:
    (tmp_path / "kvtool.toml").write_text(text)
    with pytest.raises(KvtoolError, match=needle) as error:
        load_settings(tmp_path)
    assert "kvtool.toml" in str(error.value)


def test_cli_select_replaces_ignore_adds() -> None:
    base = AuditSettings(select=("VG",), ignore=("VG003",))
    merged = apply_cli(base, select=["CN"], ignore=["CN013"], fail_on=Severity.info)
    assert merged.select == ("CN",) and merged.ignore == ("VG003", "CN013")
    assert merged.fail_on is Severity.info
    assert apply_cli(base, select=["VG002,CN010", "SZ"]).select == ("VG002", "CN010", "SZ")


def test_per_file_ignores_and_severity_overrides_by_name() -> None:
    settings = msgspec.convert(
        {
            "per-file-ignores": {"legacy/*.sh": ["removed-flag"]},
            "severity": {"CN010": "error"},
        },
        type=AuditSettings,
    )
    assert "VG002" not in selection_for(settings, "legacy/run.sh").enabled
    selection = selection_for(settings, "new/run.sh")
    assert "VG002" in selection.enabled and selection.severities == {"CN010": Severity.error}


def test_unknown_selector_in_settings_is_a_usage_error() -> None:
    with pytest.raises(KvtoolError, match="VG9"):
        selection_for(AuditSettings(ignore=("VG9",), source="kvtool.toml"), None)
