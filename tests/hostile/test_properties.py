"""Every reader of untrusted text, fed arbitrary input: only kvtool's own error type
escapes (``KvtoolError``, which the CLI turns into one line and exit 2), in bounded time.

Examples are few per property to keep the suite fast; the strategies lean on the
characters that matter to each format (quotes, brackets, anchors, newlines, digits).
"""

from __future__ import annotations

import contextlib
import functools
import json
import shlex
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvtool.errors import KvtoolError

EXAMPLES = 40
SECONDS_PER_EXAMPLE = 2.0



def _texts(alphabet: str) -> st.SearchStrategy[str]:
    return st.text(alphabet=st.sampled_from(list(alphabet)), max_size=200)


_SHELL = _texts("vlm serv-=$'\"\\{}():+#\n\r\t`;|&<>ABX01")
_YAML = _texts("abk: -[]{}&*!|>'\"\n #,?0123\t")
_JSONISH = _texts('{}[]":,0123456789.eE-+ truefalsn\\\n')
_DOCKERFILE = _texts('FROMCDENTYPIvlm serv-[]"\\ ,\n#=$:ABX01')
_PROM = _texts('ab_:{}="\\, 0123456789.eE+-#\nNaInf')


def _bounded(read: Callable[[], Any]) -> None:
    started = time.perf_counter()
    with contextlib.suppress(KvtoolError):
        read()
    assert time.perf_counter() - started < SECONDS_PER_EXAMPLE


_PROPERTY = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


@_PROPERTY
@given(_SHELL)
def test_shell_reader(text: str) -> None:
    from kvtool.audit.inputs import read_text

    _bounded(lambda: read_text("vllm serve m " + text, "x.sh", input_format="shell"))


@pytest.mark.parametrize(
    "kind", ["kubernetes", "compose", "vllm-config", "kaito", "helm-values", "skypilot"]
)
@_PROPERTY
@given(text=_YAML)
def test_yaml_readers(kind: str, text: str) -> None:
    from kvtool.audit.inputs import read_text

    _bounded(lambda: read_text(text, "x.yaml", input_format=kind))


@_PROPERTY
@given(_DOCKERFILE)
def test_dockerfile_reader(text: str) -> None:
    from kvtool.audit.inputs import read_text

    dockerfile = "FROM vllm/vllm-openai\n" + text
    _bounded(lambda: read_text(dockerfile, "Dockerfile", input_format="dockerfile"))


@_PROPERTY
@given(_JSONISH)
def test_json_flag_values(text: str) -> None:
    """A JSON-valued flag (--kv-transfer-config, plain or dotted) of any text reads as
    a parse problem or a value, never a crash."""
    from kvtool.audit.inputs import read_text
    from kvtool.audit.normalize import normalize
    from kvtool.releases.loader import available_versions, load_release

    facts = load_release(available_versions()[-1])
    script = (
        f"vllm serve m --kv-transfer-config {shlex.quote(text)} "
        f"--kv-transfer-config.kv_connector_extra_config.x={shlex.quote(text)}\n"
    )
    for invocation in read_text(script, "x.sh", input_format="shell"):
        _bounded(functools.partial(normalize, invocation, facts))


_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet='[]{}"\\ab', max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=20,
)


def _depth(value: object) -> int:
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    return 0


@_PROPERTY
@given(_JSON_VALUES)
def test_json_depth_prescan_matches_the_parsed_depth(value: object) -> None:
    """The pre-scan counts exactly the nesting json.loads will recurse through."""
    from kvtool.nesting import json_depth

    text = json.dumps(value)
    assert json_depth(text) == json_depth(text.encode()) == _depth(value)


@_PROPERTY
@given(_JSONISH)
def test_json_prescan_then_parse(text: str) -> None:
    """Any text: the pre-scan refuses with kvtool's error or the parser gets it; a parse
    that passed the scan never runs out of stack."""
    from kvtool.nesting import loads_json

    def load() -> None:
        with contextlib.suppress(ValueError):  # not JSON: the readers' own message
            loads_json(text, "x")

    _bounded(load)


@_PROPERTY
@given(_JSONISH)
def test_config_json_reader(tmp_path: Path, text: str) -> None:
    from kvtool.sizing.model_spec import load_model_spec

    config = tmp_path / "config.json"
    config.write_text('{"model_type": "llama", "num_hidden_layers": ' + text + "}")
    _bounded(lambda: load_model_spec(str(config)))


@_PROPERTY
@given(st.dictionaries(st.sampled_from(["model_type", "num_hidden_layers", "hidden_size",
                                        "num_attention_heads", "num_key_value_heads",
                                        "head_dim", "text_config", "torch_dtype", "architectures",
                                        "layer_types", "sliding_window", "use_sliding_window",
                                        "max_window_layers", "quantization_config",
                                        "max_position_embeddings", "kv_lora_rank"]),
                       st.one_of(st.integers(), st.floats(), st.text(max_size=5), st.booleans(),
                                 st.none(), st.lists(st.integers(), max_size=3),
                                 st.lists(st.text(max_size=3), max_size=3),
                                 st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))))
def test_config_json_fields(tmp_path: Path, fields: dict[str, Any]) -> None:
    from kvtool.sizing.model_spec import load_model_spec

    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "llama", **fields}))
    _bounded(lambda: load_model_spec(str(config)))


@_PROPERTY
@given(_JSONISH)
def test_trace_reader(tmp_path: Path, text: str) -> None:
    from kvtool.simulate.trace import read_trace

    trace = tmp_path / "trace.jsonl"
    trace.write_text('{"id": "a", "prefix": "p", "prefix_tokens": ' + text + "}\n")
    _bounded(lambda: read_trace(trace))


@_PROPERTY
@given(st.binary(max_size=100))
def test_trace_reader_bytes(tmp_path: Path, data: bytes) -> None:
    from kvtool.simulate.trace import read_trace

    trace = tmp_path / "trace.jsonl"
    trace.write_bytes(data)
    _bounded(lambda: read_trace(trace))


@_PROPERTY
@given(st.text(alphabet=st.sampled_from(list('[]{}="ab.0123456789\n,tru ')), max_size=200))
def test_toml_settings_reader(tmp_path: Path, text: str) -> None:
    from kvtool.audit.settings import load_settings

    (tmp_path / "kvtool.toml").write_text(text)
    _bounded(lambda: load_settings(tmp_path))


@_PROPERTY
@given(_PROM)
def test_prometheus_reader(text: str) -> None:
    from kvtool.verify.prometheus import parse

    _bounded(lambda: parse(text, "metrics"))


@_PROPERTY
@given(st.one_of(_JSONISH.map(str.encode), st.binary(max_size=100)))
def test_registry_answers(body: bytes) -> None:
    from kvtool.image.manifest import load_json_object

    _bounded(lambda: load_json_object(body, "manifest"))


@_PROPERTY
@given(_texts('Bearer Basic realm=service,scope"\\ :/.ab\t'))
def test_registry_challenges(header: str) -> None:
    """Any WWW-Authenticate header a registry sends parses (or is kvtool's error)."""
    from kvtool.image.auth import parse_challenge

    _bounded(lambda: parse_challenge(header))
