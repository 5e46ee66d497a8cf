"""Random argv, shell, YAML and JSON never make the readers or normalize raise anything
but KvtoolError (which the CLI turns into one line and exit code 2)."""

from __future__ import annotations

import json

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvtool.audit.inputs import FILE_FORMATS, read_argv, read_text
from kvtool.audit.normalize import normalize
from kvtool.errors import KvtoolError
from kvtool.releases import load_release

FACTS = load_release("0.32.0")
FLAG_WORDS = [f.name for f in FACTS.flags[:60]] + ["-tp", "-O3", "-O", "--", "--config", "-cc.x"]
FUZZ = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])

word = st.one_of(
    st.sampled_from(FLAG_WORDS),
    st.text(alphabet="-_=.+{}[]\":,abc019 $'\\", max_size=12),
    st.sampled_from(["--kv-transfer-config.kv_connector", "--kv-transfer-config.a.b+", "-O=3"]),
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)


def normalize_all(text: str, file: str, input_format: str | None) -> None:
    try:
        invocations = read_text(text, file, input_format=input_format)
    except KvtoolError as error:
        assert "\n" not in str(error), "the CLI prints errors as one line"
        return
    for invocation in invocations:
        normalize(invocation, FACTS)


@FUZZ
@given(st.lists(word, max_size=12))
def test_random_argv(words: list[str]) -> None:
    try:
        invocation = read_argv(["vllm", "serve", *words])
    except KvtoolError:
        return
    normalize(invocation, FACTS)


@FUZZ
@given(
    json_values,
    st.lists(st.tuples(st.text(alphabet="abc_.+", max_size=6), json_values), max_size=3),
)
def test_random_json_values(whole: object, dotted: list[tuple[str, object]]) -> None:
    argv = ["vllm", "serve", "m", "--kv-transfer-config", json.dumps(whole)]
    for key, value in dotted:
        argv += [f"--kv-transfer-config.{key}", json.dumps(value)]
    normalize(read_argv(argv), FACTS)


@FUZZ
@given(st.text(alphabet="vlmserv -_=.$'\"\\{}()#;&|<>\n:+`", max_size=80))
def test_random_shell_text(text: str) -> None:
    normalize_all("vllm serve " + text, "run.sh", "shell")


@FUZZ
@given(st.text(max_size=120), st.sampled_from([None, *FILE_FORMATS]))
def test_random_text_any_format(text: str, input_format: str | None) -> None:
    normalize_all(text, "input.yaml", input_format)


@FUZZ
@given(st.dictionaries(st.text(max_size=10), json_values, max_size=5))
def test_random_vllm_config_mappings(items: dict[str, object]) -> None:
    normalize_all(yaml.safe_dump(items), "config.yaml", "vllm-config")


@FUZZ
@given(st.lists(st.one_of(word, st.integers(), st.none(), json_values), max_size=8), json_values)
def test_random_kubernetes_containers(args: list[object], env_value: object) -> None:
    manifest = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "annotations": {"kvtool.io/ignore": str(env_value)}},
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "image": "vllm/vllm-openai:v0.32.0",
                    "args": args,
                    "env": [{"name": "X", "value": env_value}],
                }
            ]
        },
    }
    normalize_all(yaml.safe_dump(manifest), "pod.yaml", None)
