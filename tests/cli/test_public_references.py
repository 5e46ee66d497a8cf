"""Everything a user reads points at things a user can open: public URLs, or files of
this repository. No internal note (``shared/...``), machine path or unknown document
name reaches rule docs, reports, SARIF, launch output, notes, recipes or shipped data.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kvtool.audit.registry import registry
from kvtool.audit.ruledocs import markdown, rule_text
from kvtool.launch.recipe import load_recipes
from kvtool.releases import available_versions
from tests.conftest import REPO_ROOT, CliResult
from tests.vllm_env import vllm_python

Cli = Callable[..., CliResult]

URL = re.compile(r"https?://[^\s\"'<>)\]`,;]+")
# Paths that can never open for a user: internal notes and this machine's work folders.
PRIVATE = re.compile(r"shared/(?:reference|seeds)/|/work/")
# Plain http is fine for endpoints on the user's own machine (metrics, health checks).
LOCAL_HOSTS = ("http://127.0.0.1", "http://localhost", "http://0.0.0.0", "http://${")
# A document a user would try to open: a file name ending in .md or .txt.
DOCUMENT = re.compile(r"(?<![\w/.-])([\w.-]+/)*[\w.-]+\.(?:md|txt)\b")
SHIPPED_DATA = [*sorted((REPO_ROOT / "rules").rglob("*.toml")),
                *sorted((REPO_ROOT / "recipes").glob("*.yaml")),
                REPO_ROOT / "recipes" / "README.md", REPO_ROOT / "README.md",
                *sorted((REPO_ROOT / "docs").glob("*.md"))]


def problems(text: str, where: str) -> Iterator[str]:
    """Each private path or unknown document named in ``text`` outside a URL."""
    outside_urls = URL.sub(" ", text)
    for match in PRIVATE.finditer(outside_urls):
        yield f"{where}: private path near {outside_urls[match.start():match.end() + 40]!r}"
    for match in DOCUMENT.finditer(outside_urls):
        name = match.group(0)
        if not (REPO_ROOT / name).exists() and not any(REPO_ROOT.rglob(Path(name).name)):
            yield f"{where}: {name!r} is neither a URL nor a file of this repository"
    for url in URL.findall(text):
        if not url.startswith(("https://", *LOCAL_HOSTS)):
            yield f"{where}: {url!r} is not an https URL"


def test_the_check_catches_what_it_is_for() -> None:
    bad = "see shared/reference/version-gates.md §4 and sizing.md, or /work/main/x"
    assert len(list(problems(bad, "t"))) >= 3
    good = "docs/rules.md and https://github.com/vllm-project/vllm/blob/v0.32.0/vllm/envs.py"
    assert list(problems(good, "t")) == []


@pytest.mark.parametrize("path", SHIPPED_DATA, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_shipped_docs_and_data_name_only_public_places(path: Path) -> None:
    assert list(problems(path.read_text(encoding="utf-8"), str(path))) == []


def test_rule_docs_name_only_public_places() -> None:
    found = [p for rule in registry for p in problems(rule_text(rule), rule.code)]
    found += list(problems(markdown(), "docs/rules.md"))
    assert found == []
    for rule in registry:
        assert all(ref.url.startswith("https://") for ref in rule.meta.references), rule.code


def test_reports_sarif_and_notes_of_the_examples_name_only_public_places(
    kvtool_cli: Cli,
) -> None:
    examples = [str(p) for p in sorted((REPO_ROOT / "examples").iterdir())]
    for output_format in ("text", "json", "sarif", "github"):
        result = kvtool_cli("audit", *examples, "--output-format", output_format, "--exit-zero")
        assert result.exit_code == 0, result.stderr
        # The examples' own paths are repository files; everything else must be public.
        text = result.stdout + result.stderr
        for example in examples:
            text = text.replace(example, Path(example).relative_to(REPO_ROOT).as_posix())
        assert list(problems(text, f"audit --output-format {output_format}")) == []
    sarif = json.loads(kvtool_cli("audit", *examples, "--output-format", "sarif",
                                  "--exit-zero").stdout)
    for descriptor in sarif["runs"][0]["tool"]["driver"]["rules"]:
        assert descriptor["helpUri"].startswith("https://"), descriptor["id"]
    report = json.loads(kvtool_cli("audit", *examples, "--output-format", "json",
                                   "--exit-zero").stdout)
    assert report["findings"] and all(f["docs"].startswith("https://") for f in report["findings"])


@pytest.mark.parametrize("target", ["shell", "compose", "k8s", "json"])
def test_launch_output_names_only_public_places(kvtool_cli: Cli, target: str) -> None:
    newest = available_versions()[-1]
    listing = kvtool_cli("launch", "--list")
    assert list(problems(listing.stdout, "launch --list")) == []
    for recipe in load_recipes():
        if target not in recipe.target_names:
            continue
        result = kvtool_cli("launch", recipe.name, "--model", "meta-llama/Llama-3.1-8B-Instruct",
                            "--host-ram-gib", "256", "--vllm-version", newest,
                            "--target", target, "--allow-below-security-floor")
        if result.exit_code != 0:  # a recipe that does not support the newest release
            continue
        text = result.stdout + result.stderr
        assert list(problems(text, f"launch {recipe.name} --target {target}")) == []


def test_vllm_sources_cited_at_the_suite_release_exist_in_its_wheel() -> None:
    """The suite's vLLM environment holds one release's source: every reference to a
    ``vllm/`` file at that release's tag must name a file the wheel has."""
    python = vllm_python()
    probe = ("import importlib.util as u, os;"
             "print(os.path.dirname(os.path.dirname(u.find_spec('vllm').origin)))")
    site = Path(subprocess.run([str(python), "-c", probe], capture_output=True, text=True,
                               check=True).stdout.strip())
    versions = [p.name.removesuffix(".dist-info").split("-")[1]
                for p in site.glob("vllm*.dist-info")]
    assert versions, f"no vllm dist-info under {site}"
    prefix = f"https://github.com/vllm-project/vllm/blob/v{versions[0]}/"
    texts = [p.read_text(encoding="utf-8") for p in SHIPPED_DATA]
    texts += [ref.url for rule in registry for ref in rule.meta.references]
    cited = {url.removeprefix(prefix) for text in texts for url in URL.findall(text)
             if url.startswith(prefix + "vllm/")}
    assert cited, f"nothing cites vLLM {versions[0]} sources"
    missing = sorted(path for path in cited if not (site / path).is_file())
    assert missing == []
