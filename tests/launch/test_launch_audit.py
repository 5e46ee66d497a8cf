"""Every recipe, at every vLLM release it supports, passes kvtool's own audit with no error.

The launch output is read back by the audit's real input readers (shell script,
compose file, Kubernetes manifests, KAITO ConfigMap) and checked against the same
release the recipe was rendered for. Supported releases come from the generated
tables (kvtool.launch.support), so a new table is covered without editing this test.
"""

from __future__ import annotations

import pytest

from kvtool.audit.engine import Auditor
from kvtool.audit.inputs import read_text
from kvtool.audit.model import Severity
from kvtool.audit.normalize import normalize
from kvtool.audit.settings import AuditSettings
from kvtool.audit.tables import ShippedTables
from kvtool.launch.plan import LaunchOptions
from kvtool.launch.recipe import Recipe, load_recipes
from kvtool.launch.service import launch, supported_versions

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
AUDITED_TARGETS = ("shell", "compose", "k8s")
INPUT_FORMAT = {"shell": "shell", "compose": "compose", "k8s": "kubernetes"}


def _cases() -> list[tuple[Recipe, str]]:
    return [(r, version) for r in load_recipes() for version in supported_versions(r)]


def _errors(text: str, file: str, input_format: str, version: str) -> list[str]:
    invocations = read_text(text, file, input_format=input_format)
    auditor = Auditor(ShippedTables(), normalize, AuditSettings(vllm_version=version))
    report = auditor.run(invocations)
    assert len(report.invocations) == len(invocations)
    return [
        f"{f.code} {f.name}: {f.message}"
        for f in report.findings
        if f.severity is Severity.error
    ]


@pytest.mark.parametrize(
    ("recipe", "version"), _cases(), ids=lambda case: getattr(case, "name", case)
)
def test_recipe_passes_audit_at_every_supported_release(recipe: Recipe, version: str) -> None:
    for target in (t for t in AUDITED_TARGETS if t in recipe.target_names):
        options = LaunchOptions(model=MODEL, tp=2, target=target)  # type: ignore[arg-type]
        result = launch(recipe.name, options, vllm_version=version, host_ram_gib=256)
        ((name, text),) = result.files.items()
        kaito = recipe.kaito is not None
        errors = _errors(text, name, "kaito" if kaito else INPUT_FORMAT[target], version)
        assert errors == [], f"{recipe.name} --target {target} at vLLM {version}:\n{text}"


def test_the_audit_does_report_errors_in_a_broken_launch_config() -> None:
    # The check above must be able to fail: a removed flag at its release is an error.
    recipe = next(r for r in load_recipes() if r.name == "native-cpu-offload")
    options = LaunchOptions(model=MODEL, tp=2, target="shell",
                            extra_args=("--calculate-kv-scales",))
    result = launch(recipe.name, options, vllm_version="0.32.0", host_ram_gib=64)
    assert _errors(result.files["launch.sh"], "launch.sh", "shell", "0.32.0")
