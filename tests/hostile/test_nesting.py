"""Deep nesting is refused by a named limit, in one line and quickly, never by the
interpreter's stack: shell constructs (``shell_nesting_depth``) and every JSON or
TOML input kvtool reads (``nesting_depth``)."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest

from kvtool.errors import KvtoolError
from kvtool.limits import LimitExceeded

DEEP = 100_000  # far past any stack: the pre-scan must refuse it before a parser recurses
FAST_S = 5.0


def _one_line_refusal(result: Any, needle: str) -> None:
    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    assert needle in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def _timed(kvtool_cli: Any, *args: str) -> Any:
    started = time.perf_counter()
    result = kvtool_cli(*args)
    assert time.perf_counter() - started < FAST_S
    return result


# -- shell ---------------------------------------------------------------------------------


def _nested(opening: str, closing: str, depth: int, inner: str = "x") -> str:
    return opening * depth + inner + closing * depth


_SHELL_SHAPES = {
    "conditional": lambda depth: "vllm serve m " + _nested("${A:+", "}", depth) + "\n",
    "command-substitution": lambda depth: "vllm serve m " + _nested("$(", ")", depth) + "\n",
    "parameter-default": lambda depth: "vllm serve m " + _nested("${A:-", "}", depth) + "\n",
    "subshell": lambda depth: _nested("(", ")", depth, "vllm serve m") + "\n",
    "sh-c-body": lambda depth: "sh -c 'vllm serve m " + _nested("${A:+", "}", depth) + "'\n",
    "heredoc-in-sh-c": lambda depth: (
        "sh -c 'cat <<EOF >/tmp/x\n" + _nested("$(", ")", depth) + "\nEOF\n"
        "vllm serve m --port " + _nested("$(", ")", depth) + "'\n"
    ),
}


@pytest.mark.parametrize("shape", sorted(_SHELL_SHAPES))
def test_shell_nesting_limit_at_a_small_cap(
    kvtool_cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shape: str
) -> None:
    monkeypatch.setenv("KVTOOL_LIMIT_SHELL_NESTING_DEPTH", "5")
    script = tmp_path / "serve.sh"
    script.write_text(_SHELL_SHAPES[shape](5))
    within = kvtool_cli("audit", "--vllm-version", "0.32.0", str(script))
    assert within.exit_code in (0, 1), within.stderr
    script.write_text(_SHELL_SHAPES[shape](6))
    over = kvtool_cli("audit", "--vllm-version", "0.32.0", str(script))
    _one_line_refusal(over, "KVTOOL_LIMIT_SHELL_NESTING_DEPTH")
    assert re.search(re.escape(str(script)) + r":\d+:\d+: shell nesting", over.stderr)


@pytest.mark.parametrize("shape", sorted(_SHELL_SHAPES))
def test_deep_shell_nesting_is_refused_fast(kvtool_cli: Any, tmp_path: Path, shape: str) -> None:
    script = tmp_path / "serve.sh"
    script.write_text(_SHELL_SHAPES[shape](DEEP))
    result = _timed(kvtool_cli, "audit", "--vllm-version", "0.32.0", str(script))
    _one_line_refusal(result, "shell_nesting_depth")


def test_one_deep_script_among_many_is_one_report_line(kvtool_cli: Any, tmp_path: Path) -> None:
    deep = tmp_path / "deep.sh"
    deep.write_text(_SHELL_SHAPES["conditional"](DEEP))
    fine = tmp_path / "fine.sh"
    fine.write_text("vllm serve m --port 8000\n")
    result = _timed(kvtool_cli, "audit", "--vllm-version", "0.32.0", str(deep), str(fine))
    assert "Traceback" not in result.stderr
    reported = [line for line in result.stdout.splitlines() if "shell_nesting_depth" in line]
    assert len(reported) == 1 and str(deep) in reported[0], result.stdout
    assert "Checked 1 invocation" in result.stdout + result.stderr


# -- JSON and TOML -------------------------------------------------------------------------


def _deep_json(depth: int) -> str:
    return "[" * depth + "]" * depth


def _llama_config(extra: str) -> str:
    # The shape of a Llama config.json (huggingface.co/meta-llama/Llama-3.1-8B, config.json).
    return (
        '{"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096, '
        '"num_attention_heads": 32, "num_key_value_heads": 8, "torch_dtype": "bfloat16"'
        + extra
        + "}"
    )


def test_deep_config_json_for_size(kvtool_cli: Any, tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(_llama_config(', "rope_scaling": ' + _deep_json(DEEP)))
    _one_line_refusal(_timed(kvtool_cli, "size", "-m", str(config)), "nesting_depth")


def test_deep_config_json_for_audit(kvtool_cli: Any, tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(_llama_config(', "x": ' + _deep_json(DEEP)))
    script = tmp_path / "serve.sh"
    script.write_text("vllm serve m --port 8000\n")
    result = _timed(
        kvtool_cli, "audit", "--vllm-version", "0.32.0", "--model-config", str(config), str(script)
    )
    _one_line_refusal(result, "nesting_depth")


def test_deep_dockerfile_exec_form(kvtool_cli: Any, tmp_path: Path) -> None:
    # Exec-form CMD is a JSON array (docs.docker.com/reference/dockerfile/#cmd).
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text("FROM vllm/vllm-openai:v0.32.0\nCMD " + _deep_json(DEEP) + "\n")
    result = _timed(kvtool_cli, "audit", "--vllm-version", "0.32.0", str(dockerfile))
    _one_line_refusal(result, "nesting_depth")


def test_a_config_file_is_read_within_the_input_limit(
    kvtool_cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "serve.yaml").write_text("port: 8000\n" + "# padding\n" * 200)
    script = tmp_path / "serve.sh"
    script.write_text("vllm serve m --config serve.yaml\n")
    monkeypatch.setenv("KVTOOL_LIMIT_INPUT_BYTES", "1000")
    result = kvtool_cli("audit", "--vllm-version", "0.32.0", str(script))
    assert "Traceback" not in result.stderr
    assert "KVTOOL_LIMIT_INPUT_BYTES" in result.stdout + result.stderr


def test_deep_kv_transfer_config_value(kvtool_cli: Any) -> None:
    value = '{"kv_connector": "OffloadingConnector", "kv_role": "kv_both", "x": '
    value += _deep_json(DEEP) + "}"
    result = _timed(
        kvtool_cli,
        "audit", "--vllm-version", "0.32.0", "--", "vllm", "serve", "m",
        "--kv-transfer-config", value,
    )  # fmt: skip
    _one_line_refusal(result, "argument --kv-transfer-config: over the nesting_depth limit")


@pytest.mark.parametrize(
    "text",
    [
        "[audit]\nx = " + _deep_json(DEEP) + "\n",
        "x = " + "{a = " * 1000 + "1" + "}" * 1000 + "\n",
        "a" + ".a" * 1000 + " = 1\n",
        "[" + ".".join(["t"] * 1000) + "]\nx = 1\n",
    ],
    ids=["array", "inline-table", "dotted-key", "table-header"],
)
def test_deep_toml_settings(
    kvtool_cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str
) -> None:
    (tmp_path / "kvtool.toml").write_text(text)
    monkeypatch.chdir(tmp_path)
    result = _timed(kvtool_cli, "audit", "--show-settings")
    _one_line_refusal(result, "nesting_depth")


def test_deep_trace_line(kvtool_cli: Any, tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    trace.write_text(
        '{"id": "a", "prefix": "p", "prefix_tokens": 8}\n'
        '{"id": "b", "prefix": "p", "prefix_tokens": 8, "x": ' + _deep_json(DEEP) + "}\n"
    )
    result = _timed(kvtool_cli, "simulate", "--trace", str(trace), "--block-bytes", "1000")
    _one_line_refusal(result, "nesting_depth")
    assert f"{trace}:2" in result.stderr


def test_deep_image_verdicts(kvtool_cli: Any, tmp_path: Path) -> None:
    verdicts = tmp_path / "verdicts.json"
    verdicts.write_text('{"verdicts": ' + _deep_json(DEEP) + "}")
    script = tmp_path / "serve.sh"
    script.write_text("vllm serve m --port 8000\n")
    result = _timed(
        kvtool_cli, "audit", "--vllm-version", "0.32.0", "--image-verdicts", str(verdicts),
        str(script),
    )  # fmt: skip
    _one_line_refusal(result, "nesting_depth")


def test_deep_registry_answer_is_a_refusal() -> None:
    from kvtool.image.errors import RefusedError
    from kvtool.image.manifest import load_json_object

    body = ('{"schemaVersion": 2, "manifests": ' + _deep_json(DEEP) + "}").encode()
    started = time.perf_counter()
    with pytest.raises(RefusedError, match="nesting_depth"):
        load_json_object(body, "registry manifest")
    assert time.perf_counter() - started < FAST_S


def test_deep_server_answer() -> None:
    from kvtool.audit.live import _json

    with pytest.raises(KvtoolError, match="nesting_depth"):
        _json(_deep_json(DEEP).encode(), "http://127.0.0.1:8000/v1/models")


@pytest.mark.parametrize(
    ("text", "depth"),
    [
        ('{"a": [1, {"b": [2]}]}', 4),
        ('{"a": "[[[[[[[[", "b": "\\"[[["}', 1),
        ('["\\\\", [["]"]]]', 3),
        ("", 0),
    ],
)
def test_json_depth_ignores_brackets_in_strings(
    monkeypatch: pytest.MonkeyPatch, text: str, depth: int
) -> None:
    from kvtool.nesting import check_json

    # Bytes as json.loads reads them: UTF-8, or UTF-16/32 (a registry may send those).
    forms = [text, *(text.encode(encoding) for encoding in ("utf-8", "utf-16", "utf-32-be"))]
    monkeypatch.setenv("KVTOOL_LIMIT_NESTING_DEPTH", str(max(depth, 1)))
    for form in forms:
        check_json(form, "x")  # within: exactly at the limit
    if depth > 1:
        monkeypatch.setenv("KVTOOL_LIMIT_NESTING_DEPTH", str(depth - 1))
        for form in forms:
            with pytest.raises(LimitExceeded):
                check_json(form, "x")


def test_toml_depth_ignores_brackets_in_strings_and_comments(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from kvtool.nesting import loads_toml

    monkeypatch.setenv("KVTOOL_LIMIT_NESTING_DEPTH", "3")
    text = (
        '# [[[[[[\na = "[[[["\nb = \'[[[[\'\nc = """\n[[[[\n"""\n'
        "d = '''[[[['''\ne = [[1]]\n[t]\nf = 1\n"
    )
    assert loads_toml(text, "x")["e"] == [[1]]
    with pytest.raises(LimitExceeded):
        loads_toml("e = [[[1]]]\n", "x")
    with pytest.raises(LimitExceeded):
        loads_toml("a.b.c.d = 1\n", "x")
