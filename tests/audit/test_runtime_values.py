"""Values known only at run time: a JSON flag given ``"$VAR"`` and a trailing ``$EXTRA_ARGS``.

Shape: kserve/kserve docs/samples/llmisvc/e2e-gpt-oss/llmisvc_config_prefix_cache.yaml,
whose ``sh -c`` script ends ``--kv-events-config "$KV_EVENTS_CONFIG" $VLLM_ADDITIONAL_ARGS``
with both variables set by the platform, not in the file.
"""

from __future__ import annotations

from pathlib import Path

from kvtool.audit.engine import Auditor
from kvtool.audit.inputs import read_input_set
from kvtool.audit.normalize import normalize
from kvtool.audit.settings import AuditSettings
from kvtool.audit.tables import ShippedTables
from kvtool.releases import release_index

NEWEST = release_index().versions[-1]


def _codes(tmp_path: Path, script: str) -> list[str]:
    path = tmp_path / "serve.sh"
    path.write_text("#!/bin/sh\n" + script, encoding="utf-8")
    found = read_input_set([path])
    settings = AuditSettings(vllm_version=NEWEST)
    report = Auditor(ShippedTables(), normalize, settings, version_from_cli=True).run(
        found.invocations
    )
    return sorted(f.code for f in report.findings if f.severity == "error")


def test_json_flag_from_an_unknown_variable_is_not_invalid_json(tmp_path: Path) -> None:
    script = 'vllm serve m --kv-events-config "$KV_EVENTS_CONFIG" $VLLM_ADDITIONAL_ARGS\n'
    assert _codes(tmp_path, script) == []


def test_json_flag_from_a_command_substitution_is_not_invalid_json(tmp_path: Path) -> None:
    # Shape: ai-dynamo/dynamo examples/backends/vllm/deploy/agg_lmcache.yaml, whose worker
    # script reads its --kv-transfer-config from a mounted file at start.
    script = 'vllm serve m --kv-transfer-config "$(cat /etc/lmcache/kv-transfer-config.json)"\n'
    assert _codes(tmp_path, script) == []
    assert _codes(tmp_path, "vllm serve m --kv-transfer-config `cat /etc/kv.json`\n") == []
    # arithmetic expansion is no command: a literal that is not JSON is still refused
    assert _codes(tmp_path, "vllm serve m --kv-transfer-config $((1 + 2))\n") == ["VG000"]


def test_trailing_unknown_words_do_not_extend_the_previous_flag(tmp_path: Path) -> None:
    known = "EV='{\"enable_kv_cache_events\": true}'\n"
    assert _codes(tmp_path, known + 'vllm serve m --kv-events-config "$EV" $EXTRA\n') == []
    assert _codes(tmp_path, "vllm serve m --enforce-eager ${EXTRA_ARGS}\n") == []


def test_written_values_are_still_checked(tmp_path: Path) -> None:
    assert _codes(tmp_path, "vllm serve m --kv-events-config '{broken'\n") == ["VG000"]
    # a literal stray word after a JSON flag is still read as vLLM reads it
    known = "EV='{\"enable_kv_cache_events\": true}'\n"
    assert _codes(tmp_path, known + 'vllm serve m --kv-events-config "$EV" extra\n') == ["VG033"]


def test_an_option_named_at_run_time_is_not_an_unknown_flag(tmp_path: Path) -> None:
    # Shape: launchers that build `f"--{item}={vllm_args[item]}"` from a dict of settings
    # (https://github.com/FlagOpen/FlagScale's vLLM serve runner), as a script writes `--$OPT`.
    assert _codes(tmp_path, "vllm serve m --${OPT} 4 --max-num-seqs 8\n") == []
    assert _codes(tmp_path, "vllm serve m --$OPT=4 --not-a-flag\n") == ["VG001"]
