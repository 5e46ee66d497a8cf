"""Shell scripts: words, quoting, continuations, env, conditional expansions, locations."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvtool.audit.inputs import read_inputs, read_text
from kvtool.audit.model import Invocation
from kvtool.errors import KvtoolError

REPO = Path(__file__).resolve().parents[3]


def read(script: str, tmp_path: Path, name: str = "run.sh") -> list[Invocation]:
    path = tmp_path / name
    path.write_text(script)
    return read_inputs([path])


def where(invocation: Invocation, text: str) -> tuple[int | None, int | None]:
    token = next(t for t in invocation.tokens if t.text == text)
    assert token.location is not None
    return token.location.line, token.location.column


def test_continuations_quotes_and_locations(tmp_path: Path) -> None:
    script = (
        "#!/bin/bash\n"
        "vllm serve org/model \\\n"
        "  --tensor-parallel-size 4 \\\n"
        '  --kv-transfer-config \'{"kv_connector": "OffloadingConnector",\n'
        '     "kv_role": "kv_both"}\' \\\n'
        '  --served-model-name "my model"\n'
    )
    (invocation,) = read(script, tmp_path)
    texts = [t.text for t in invocation.tokens]
    assert texts == [
        "org/model",
        "--tensor-parallel-size",
        "4",
        "--kv-transfer-config",
        '{"kv_connector": "OffloadingConnector",\n     "kv_role": "kv_both"}',
        "--served-model-name",
        "my model",
    ]
    assert where(invocation, "--tensor-parallel-size") == (3, 3)
    assert where(invocation, "my model") == (6, 23)
    json_token = invocation.tokens[4]
    assert json_token.location is not None
    assert (json_token.location.line, json_token.location.end_line) == (4, 5)
    assert invocation.label == f"{tmp_path / 'run.sh'}:2"


def test_env_exports_prefixes_and_variable_expansion(tmp_path: Path) -> None:
    script = (
        "export LMCACHE_MAX_LOCAL_CPU_SIZE=40\n"
        "TP=4\n"
        'MODEL="org/model"\n'
        "VLLM_LOGGING_LEVEL=DEBUG vllm serve $MODEL -tp ${TP} --port ${PORT:-8000}\n"
    )
    (invocation,) = read(script, tmp_path)
    assert [t.text for t in invocation.tokens] == ["org/model", "-tp", "4", "--port", "8000"]
    env = {e.name: (e.value, e.location.line if e.location else None) for e in invocation.env}
    assert env == {"LMCACHE_MAX_LOCAL_CPU_SIZE": ("40", 1), "VLLM_LOGGING_LEVEL": ("DEBUG", 4)}


def test_plain_assignment_is_not_exported_until_export(tmp_path: Path) -> None:
    script = "A=1\nB=2\nexport B\nvllm serve m\n"
    (invocation,) = read(script, tmp_path)
    assert [(e.name, e.value) for e in invocation.env] == [("B", "2")]


def test_conditional_expansions(tmp_path: Path) -> None:
    script = 'vllm serve m ${EAGER:+--enforce-eager} ${SIZE:+--kv-offloading-size "$SIZE"}\n'
    (invocation,) = read(script, tmp_path)
    conditional = [(t.text, t.conditional) for t in invocation.tokens]
    assert conditional == [
        ("m", False),
        ("--enforce-eager", True),
        ("--kv-offloading-size", True),
        ("$SIZE", True),
    ]
    assert where(invocation, "--enforce-eager") == (1, 23)


def test_conditional_of_a_variable_set_in_the_script_is_certain(tmp_path: Path) -> None:
    (invocation,) = read("EAGER=1\nvllm serve m ${EAGER:+--enforce-eager}\n", tmp_path)
    assert [(t.text, t.conditional) for t in invocation.tokens][-1] == ("--enforce-eager", False)


def test_several_commands_exec_redirections_and_heredoc(tmp_path: Path) -> None:
    script = (
        "set -e\n"
        "cat <<EOF\n"
        "vllm serve not-a-command\n"
        "EOF\n"
        "vllm serve a --port 1 > a.log 2>&1 &\n"
        "exec python3 -m vllm.entrypoints.openai.api_server --model b; echo done\n"
        'nohup vllm serve c "$@"  # passes through its own arguments\n'
    )
    first, second, third = read(script, tmp_path)
    assert [t.text for t in first.tokens] == ["a", "--port", "1"]
    assert [t.text for t in second.tokens] == ["--model", "b"]
    assert [t.text for t in third.tokens] == ["c"]
    assert [first.label.rsplit(":", 1)[1], second.label.rsplit(":", 1)[1]] == ["5", "6"]


def test_docker_run_with_explicit_command_and_with_image_entrypoint(tmp_path: Path) -> None:
    script = (
        "docker run --gpus all -e VLLM_USE_V1=1 --ipc=host vllm/vllm-openai:v0.31.0 "
        "--model org/a -tp 2\n"
        "docker run --rm -p 8000:8000 ghcr.io/acme/server:1 vllm serve org/b\n"
    )
    image_entrypoint, explicit = read(script, tmp_path)
    assert image_entrypoint.image == "vllm/vllm-openai:v0.31.0"
    assert [t.text for t in image_entrypoint.tokens] == ["--model", "org/a", "-tp", "2"]
    assert [(e.name, e.value) for e in image_entrypoint.env] == [("VLLM_USE_V1", "1")]
    assert explicit.image == "ghcr.io/acme/server:1"
    assert [t.text for t in explicit.tokens] == ["org/b"]


def test_sh_c_script_is_read_with_locations(tmp_path: Path) -> None:
    script = "bash -c 'vllm serve m --port 9'\n"
    (invocation,) = read(script, tmp_path)
    assert where(invocation, "--port") == (1, 23)


def test_inline_suppressions(tmp_path: Path) -> None:
    script = (
        "# kvtool: ignore[SZ001,CN010] sized per rank on purpose\n"
        "vllm serve m \\\n"
        "  --port 1  # kvtool: ignore[VG001]\n"
    )
    (invocation,) = read(script, tmp_path)
    above, trailing = invocation.suppressions
    assert (above.codes, above.reason, above.scope) == (
        ("SZ001", "CN010"),
        "sized per rank on purpose",
        "invocation",
    )
    assert (trailing.codes, trailing.reason, trailing.scope, trailing.target_line) == (
        ("VG001",),
        None,
        "line",
        3,
    )


def test_config_reference_is_resolved_next_to_the_script(tmp_path: Path) -> None:
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "serve.yaml").write_text("port: 9000\nkv-transfer-config:\n  a: 1\n")
    (invocation,) = read("vllm serve m --config conf/serve.yaml\n", tmp_path)
    keys = [(k, v, loc.line if loc else None) for k, v, loc in invocation.config_items]
    assert keys == [("port", 9000, 1), ("kv-transfer-config", {"a": 1}, 2)]
    assert invocation.config_items[0][2].file == str(tmp_path / "conf" / "serve.yaml")  # type: ignore[union-attr]


def test_missing_config_reference_is_a_note_not_an_error(tmp_path: Path) -> None:
    (invocation,) = read("vllm serve m --config /etc/vllm/serve.yaml\n", tmp_path)
    assert invocation.config_items == ()
    assert "no such file here" in invocation.notes[0]


def test_unterminated_quote_names_file_line_and_column(tmp_path: Path) -> None:
    with pytest.raises(KvtoolError, match=r"run\.sh:2:17: unterminated single quote"):
        read("echo ok\nvllm serve m -x 'oops\n", tmp_path)


def test_script_without_vllm_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(KvtoolError, match="no vLLM server command found"):
        read("echo hello\n", tmp_path)


def test_shipped_lmcache_example() -> None:
    (invocation,) = read_inputs([REPO / "examples" / "lmcache-tp4.sh"])
    texts = [t.text for t in invocation.tokens]
    assert texts[0] == "meta-llama/Llama-3.1-70B-Instruct"
    assert {"--calculate-kv-scales", "--disable-hybrid-kv-cache-manager"} <= set(texts)
    assert ("LMCACHE_MAX_LOCAL_CPU_SIZE", "40") in [(e.name, e.value) for e in invocation.env]


def test_read_text_without_a_file() -> None:
    (invocation,) = read_text("vllm serve m\n", None, input_format="shell")
    assert invocation.label == "<input>:1"


def test_config_references_vllm_would_reject_are_noted(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text("{}")
    (invocation,) = read("vllm serve m --config a.json\n", tmp_path)
    assert invocation.config_items == ()
    assert "only .yaml/.yml" in invocation.notes[0]
    (twice,) = read("vllm serve m --config a.yaml --config b.yaml\n", tmp_path)
    assert "more than once" in twice.notes[0]
    (equals,) = read("vllm serve m --config=a.yaml\n", tmp_path)
    assert "not expanded" in equals.notes[0]


def test_commands_that_only_mention_vllm_are_not_starts(tmp_path: Path) -> None:
    script = "echo starting vllm serve now\nprintf '%s' vllm serve\nvllm serve m\n"
    (invocation,) = read(script, tmp_path)
    assert [t.text for t in invocation.tokens] == ["m"]


def test_sh_c_positional_arguments_stand_for_dollar_at_and_dollar_zero() -> None:
    """`sh -c 'exec vllm serve "$@"' NAME ARGS`: ARGS are the script's "$@" (the shape of
    ai-dynamo/dynamo examples/backends/vllm/deploy/agg_lmcache.yaml, here in a script)."""
    script = "#!/bin/sh\nsh -c 'exec vllm serve \"$@\" --max-num-seqs 8' name m --enforce-eager\n"
    (invocation,) = read_text(script, "run.sh")
    assert [t.text for t in invocation.tokens] == ["m", "--enforce-eager", "--max-num-seqs", "8"]
    assert [t.location.column for t in invocation.tokens[:2] if t.location] == [
        script.splitlines()[1].index("m --enforce") + 1,
        script.splitlines()[1].index("--enforce") + 1,
    ]
    unknown = "#!/bin/sh\nexec vllm serve \"$@\" --max-num-seqs 8\n"
    (wrapper,) = read_text(unknown, "run.sh")
    assert [t.text for t in wrapper.tokens] == ["--max-num-seqs", "8"]
