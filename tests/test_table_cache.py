"""The parsed-table cache behind :func:`kvtool.resources.read_table`: a table is read from
the cache only while it is unchanged, and a damaged or unwritable cache never changes an
answer or fails a command."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from kvtool.errors import KvtoolError
from kvtool.resources import read_table, rules_dir


@pytest.fixture
def cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))
    monkeypatch.delenv("KVTOOL_TABLE_CACHE", raising=False)
    return home / "kvtool" / "tables"


def test_a_cached_table_equals_the_parsed_one(cache_home: Path) -> None:
    for path in sorted(rules_dir().rglob("*.toml")):
        expected = tomllib.loads(path.read_text(encoding="utf-8"))
        assert read_table(path) == expected  # parsed, then stored
        assert read_table(path) == expected  # from the cache
    assert len(list(cache_home.glob("*.json"))) == len(list(rules_dir().rglob("*.toml")))


def test_an_edited_table_is_parsed_again(cache_home: Path, tmp_path: Path) -> None:
    table = tmp_path / "t.toml"
    table.write_text('rows = [{name = "a"}]\n', encoding="utf-8")
    assert read_table(table) == {"rows": [{"name": "a"}]}
    table.write_text('rows = [{name = "b"}, {name = "c"}]\n', encoding="utf-8")
    assert read_table(table) == {"rows": [{"name": "b"}, {"name": "c"}]}


def test_a_damaged_or_unwritable_cache_is_passed_over(
    cache_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = tmp_path / "t.toml"
    table.write_text("x = 1\n", encoding="utf-8")
    assert read_table(table) == {"x": 1}
    (entry,) = cache_home.glob("*.json")
    entry.write_bytes(b"{not json")
    assert read_table(table) == {"x": 1}
    # A cache home that is a file: nothing can be written under it (root included).
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("", encoding="utf-8")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    assert read_table(table) == {"x": 1}


def test_a_table_with_a_toml_date_is_never_cached(cache_home: Path, tmp_path: Path) -> None:
    table = tmp_path / "dated.toml"
    table.write_text("published = 2026-01-02\n", encoding="utf-8")
    first = read_table(table)
    assert read_table(table) == first and not list(cache_home.glob("*.json"))


def test_a_check_runs_when_the_table_is_parsed_and_its_pass_is_cached(
    cache_home: Path, tmp_path: Path
) -> None:
    table = tmp_path / "t.toml"
    table.write_text("x = 1\n", encoding="utf-8")
    checked: list[dict[str, object]] = []

    def count(path: Path, parsed: dict[str, object]) -> None:
        checked.append(parsed)

    assert read_table(table, check=count) == {"x": 1}
    assert read_table(table, check=count) == {"x": 1}  # from the cache: passed already
    assert checked == [{"x": 1}]
    table.write_text("x = 2\n", encoding="utf-8")
    assert read_table(table, check=count) == {"x": 2}
    assert checked == [{"x": 1}, {"x": 2}]


def test_a_table_failing_its_check_is_never_cached(cache_home: Path, tmp_path: Path) -> None:
    table = tmp_path / "t.toml"
    table.write_text("x = 1\n", encoding="utf-8")
    read_table(table)  # cached without a check: that entry does not count as checked

    def refuse(path: Path, parsed: dict[str, object]) -> None:
        raise KvtoolError(f"{path}: refused")

    for _ in range(2):
        with pytest.raises(KvtoolError, match="refused"):
            read_table(table, check=refuse)
