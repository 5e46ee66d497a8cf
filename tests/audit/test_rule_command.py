"""``kvtool rule`` and the generated docs/rules.md come from the registry."""

from __future__ import annotations

import json
import re
from collections.abc import Callable

from kvtool.audit.registry import registry
from kvtool.audit.render.json_report import docs_anchor
from kvtool.audit.ruledocs import markdown
from kvtool.project import repository_file_url
from tests.conftest import REPO_ROOT, CliResult

Cli = Callable[..., CliResult]


def test_rule_by_code_and_by_name_prints_every_section(kvtool_cli: Cli) -> None:
    by_code = kvtool_cli("rule", "SZ001")
    by_name = kvtool_cli("rule", "kv-offloading-size-per-rank")
    assert by_code.exit_code == 0 and by_code.stdout == by_name.stdout
    for section in ("What", "Why", "Example", "Fix", "Releases", "References"):
        assert f"\n{section}\n" in by_code.stdout
    assert by_code.stdout.startswith(
        "SZ001 kv-offloading-size-per-rank (warning; fix: unsafe or display; since kvtool 0.1.0)"
    )


def test_rule_all_as_json_lists_every_rule_with_metadata(kvtool_cli: Cli) -> None:
    document = json.loads(kvtool_cli("rule", "--all", "--output-format", "json").stdout)
    assert document["schema_version"] == 1
    rules = document["rules"]
    assert [r["code"] for r in rules] == [r.code for r in registry]
    assert all(r["references"] and r["sections"]["Why"] for r in rules)


def test_unknown_rule_and_missing_argument_exit_2(kvtool_cli: Cli) -> None:
    unknown = kvtool_cli("rule", "ZZ999")
    assert unknown.exit_code == 2 and "ZZ999" in unknown.stderr
    assert kvtool_cli("rule").exit_code == 2


def test_committed_docs_match_the_registry(kvtool_cli: Cli) -> None:
    committed = (REPO_ROOT / "docs" / "rules.md").read_text(encoding="utf-8")
    assert committed == markdown(), "docs/rules.md is stale: run python scripts/gen_rule_docs.py"
    assert kvtool_cli("rule", "--all", "--output-format", "markdown").stdout == committed


def test_every_docs_link_of_a_finding_lands_on_its_rule_heading() -> None:
    committed = (REPO_ROOT / "docs" / "rules.md").read_text(encoding="utf-8")
    # GitHub's heading slug: lower case, punctuation dropped, spaces to dashes.
    slugs = {
        re.sub(r"[^a-z0-9 -]", "", heading.lower()).replace(" ", "-")
        for heading in re.findall(r"^### (.+)$", committed, re.MULTILINE)
    }
    for rule in registry:
        path, _, slug = docs_anchor(rule.code, rule.name).partition("#")
        assert path == repository_file_url("docs/rules.md") and slug in slugs, rule.code


def test_one_rule_as_markdown_is_its_section_of_the_docs(kvtool_cli: Cli) -> None:
    committed = (REPO_ROOT / "docs" / "rules.md").read_text(encoding="utf-8")
    result = kvtool_cli("rule", "kv-offloading-size-per-rank", "--output-format", "markdown")
    assert result.exit_code == 0
    assert result.stdout.startswith("### SZ001 kv-offloading-size-per-rank\n")
    assert result.stdout in committed
