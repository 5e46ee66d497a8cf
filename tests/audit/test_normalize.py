"""normalize() against vLLM's parser behaviour.

Each case cites the behaviour it reproduces: shared/reference/version-gates.md §6
("Aliases and spellings the auditor must normalise", "JSON-valued flags") and
vLLM's ``FlexibleArgumentParser.parse_args`` / ``load_config_file`` /
``_pull_args_from_config`` (vllm/utils/argparse_utils.py), plus CPython argparse
(``_parse_optional``, ``_get_option_tuples`` with allow_abbrev=True).
"""

from __future__ import annotations

import msgspec
import pytest

from kvtool.audit.inputs import read_argv
from kvtool.audit.model import Invocation, Location, ServeConfig
from kvtool.audit.normalize import normalize
from tests.audit.inputs.release_fixture import (
    BASE_FLAGS,
    OLD_COMPILATION,
    OPTIMIZATION_LEVEL,
    make_facts,
)

FACTS = make_facts(OPTIMIZATION_LEVEL)


def parse(command: str, facts=FACTS) -> ServeConfig:  # type: ignore[no-untyped-def]
    return normalize(read_argv(command.split()), facts)


def values(config: ServeConfig) -> dict[str, object]:
    """Effective value per flag (argparse keeps the last occurrence)."""
    return {o.flag: o.value for o in config.options if not o.overridden and not o.key_path}


def test_underscores_become_dashes_in_option_names_only() -> None:
    # version-gates.md §6: "--kv_offloading_size" is rewritten by FlexibleArgumentParser;
    # values keep their underscores.
    config = parse("vllm serve m --kv_offloading_size 64 --served_model_name my_model")
    assert values(config)["--kv-offloading-size"] == "64"
    assert values(config)["--served-model-name"] == "my_model"
    option = config.option("--kv-offloading-size")
    assert option is not None and option.written == "--kv_offloading_size"


def test_equals_form_and_short_alias() -> None:
    # version-gates.md §6: "--flag=value forms" and short aliases such as -tp.
    config = parse("vllm serve m --port=8001 -tp 4 -pp=2")
    assert values(config) == {
        "--port": "8001",
        "--tensor-parallel-size": "4",
        "--pipeline-parallel-size": "2",
    }
    assert config.option("--tensor-parallel-size").written == "-tp"  # type: ignore[union-attr]


def test_unambiguous_prefix_is_accepted() -> None:
    # version-gates.md §6: allow_abbrev is never disabled, "--kv-offloading-b" is accepted.
    config = parse("vllm serve m --kv-offloading-b native --tensor-parallel 2")
    assert values(config)["--kv-offloading-backend"] == "native"
    assert values(config)["--tensor-parallel-size"] == "2"
    assert config.problems == ()


def test_ambiguous_prefix_is_a_problem_listing_candidates() -> None:
    # argparse: "ambiguous option: --kv-offloading could match ..." exits 2.
    config = parse("vllm serve m --kv-offloading 8")
    assert len(config.problems) >= 1
    message = config.problems[0].message
    assert "--kv-offloading-size" in message and "--kv-offloading-backend" in message


def test_no_form_sets_false_and_last_occurrence_wins() -> None:
    # BooleanOptionalAction adds --no-X; argparse stores the last value given.
    config = parse("vllm serve m --no-enable-prefix-caching --enable-prefix-caching")
    assert values(config)["--enable-prefix-caching"] is True
    first, second = config.options
    assert (first.value, first.overridden) == (False, True)
    assert (second.value, second.overridden) == (True, False)


def test_boolean_flag_rejects_explicit_value() -> None:
    # argparse: "argument --enforce-eager: ignored explicit argument 'yes'".
    config = parse("vllm serve m --enforce-eager=yes")
    assert "ignored explicit argument" in config.problems[0].message


def test_optional_value_flag_takes_a_value_or_stands_alone() -> None:
    # bool|str|None fields get nargs='?' with const=True (version-gates.md §6, --hf-token).
    assert values(parse("vllm serve m --hf-token --port 1"))["--hf-token"] is True
    assert values(parse("vllm serve m --hf-token abc"))["--hf-token"] == "abc"


def test_missing_value_is_a_problem() -> None:
    # argparse: "argument --port: expected one argument".
    config = parse("vllm serve m --port --enforce-eager")
    assert config.problems[0].message == "argument --port: expected one argument"
    assert values(config)["--enforce-eager"] is True


def test_negative_number_is_a_value() -> None:
    # argparse treats "-1" as a value when no option looks like a negative number.
    config = parse("vllm serve m --kv-offloading-size -1")
    assert values(config)["--kv-offloading-size"] == "-1"
    assert config.problems == ()


@pytest.mark.parametrize("spelling", ["-O3", "-O=3", "-O 3"])
def test_optimization_level_shorthands(spelling: str) -> None:
    # version-gates.md §6: -O3, -O 3 and -O=3 are rewritten to --optimization-level.
    config = parse(f"vllm serve m {spelling}")
    assert values(config) == {"--optimization-level": "3"}
    assert config.problems == ()


def test_O_is_compilation_config_where_optimization_level_does_not_exist() -> None:
    # Older releases: -O3 became "-O 3" and -O aliased --compilation-config.
    old = make_facts(base=tuple(f for f in BASE_FLAGS if f.name != "--compilation-config"))
    old = msgspec.structs.replace(old, flags=(*old.flags, OLD_COMPILATION))
    config = parse("vllm serve m -O3", old)
    assert values(config) == {"--compilation-config": 3}


def test_unknown_flag_is_kept_with_its_value() -> None:
    config = parse("vllm serve m --calculate-kv-scales --kv-offload-gib 8")
    unknown = {o.flag: o.value for o in config.options if not o.known}
    assert unknown == {"--calculate-kv-scales": True, "--kv-offload-gib": "8"}
    assert config.model == "m"


def test_model_option_moves_to_the_positional_model() -> None:
    # FlexibleArgumentParser: "vllm serve -tp 2 --model M" -> "vllm serve M -tp 2".
    config = parse("vllm serve -tp 2 --model org/m --port 1")
    assert config.model == "org/m"
    assert values(config) == {"--tensor-parallel-size": "2", "--port": "1"}
    assert parse("vllm serve --model=org/m").model == "org/m"


def test_model_option_and_positional_model_conflict() -> None:
    # After the move the original positional is left over: argparse reports it.
    config = parse("vllm serve a --model b")
    assert config.model == "b"
    assert config.problems[0].message == "unrecognized arguments: a"


def test_whole_json_value() -> None:
    config = parse("""vllm serve m --kv-transfer-config {"kv_connector":"NixlConnector"}""")
    assert config.json_values["--kv-transfer-config"] == {"kv_connector": "NixlConnector"}


def test_invalid_json_is_a_problem_with_location() -> None:
    invocation = read_argv(["vllm", "serve", "m", "--kv-transfer-config", "{kv_connector:"])
    token = msgspec.structs.replace(invocation.tokens[1], location=Location(file="run.sh", line=3))
    invocation = msgspec.structs.replace(
        invocation, tokens=(invocation.tokens[0], token, *invocation.tokens[2:])
    )
    config = normalize(invocation, FACTS)
    problem = config.problems[0]
    assert "invalid JSON" in problem.message and problem.flag == "--kv-transfer-config"
    assert problem.location == Location(file="run.sh", line=3)


def test_dotted_keys_nested_keys_and_list_append_merge() -> None:
    # version-gates.md §6 "JSON-valued flags": dotted keys, nested dotted keys, "+" append.
    config = parse(
        "vllm serve m --kv-transfer-config.kv_connector OffloadingConnector "
        "--kv-transfer-config.kv_connector_extra_config.spec_name CPUOffloadingSpec "
        "--kv-transfer-config.kv_connector_extra_config.connectors+ a,b "
        "--kv-transfer-config.kv_connector_extra_config.connectors+=c "
        "--kv-transfer-config.kv_connector_extra_config.num_cpu_blocks=1000"
    )
    assert config.json_values["--kv-transfer-config"] == {
        "kv_connector": "OffloadingConnector",
        "kv_connector_extra_config": {
            "spec_name": "CPUOffloadingSpec",
            "connectors": ["a", "b", "c"],
            "num_cpu_blocks": 1000,
        },
    }
    first = config.options[0]
    assert first.key_path == ("kv_connector",) and first.value == "OffloadingConnector"


def test_dotted_keys_replace_an_earlier_whole_json() -> None:
    # vLLM appends the merged dotted keys after all other args as one JSON argument,
    # and argparse keeps the last: the whole JSON given earlier is discarded.
    config = parse(
        """vllm serve m --kv-transfer-config {"kv_connector":"Nixl","kv_role":"kv_both"} """
        "--kv-transfer-config.kv_role kv_producer"
    )
    assert config.json_values["--kv-transfer-config"] == {"kv_role": "kv_producer"}
    whole = config.options[0]
    assert whole.overridden and whole.key_path == ()


def test_later_whole_json_replaces_earlier() -> None:
    config = parse(
        """vllm serve m --kv-transfer-config {"kv_connector":"A"} """
        """--kv-transfer-config {"kv_role":"kv_both"}"""
    )
    assert config.json_values["--kv-transfer-config"] == {"kv_role": "kv_both"}


def test_dotted_value_human_readable_number_and_alias_key() -> None:
    # vLLM parses dotted values as JSON, else human-readable ints (1k, 80g, 2G), else text.
    config = parse("vllm serve m -cc.max_size 2G -cc.mode none")
    assert config.json_values["--compilation-config"] == {"max_size": 2 * 2**30, "mode": "none"}


def test_dotted_key_on_a_plain_flag_is_a_problem() -> None:
    config = parse("vllm serve m --port.x 1")
    assert "takes no dotted keys" in config.problems[0].message


def _config_invocation(items: list[tuple[str, object]], tokens: list[str]) -> Invocation:
    argv = read_argv(tokens)
    return msgspec.structs.replace(
        argv,
        **{
            "config_items": tuple(
                (k, v, Location(file="c.yaml", line=i + 1)) for i, (k, v) in enumerate(items)
            )
        }
    )


def test_config_items_are_overridden_by_the_command_line() -> None:
    # _pull_args_from_config: config args go after the model, before CLI args (cli > config).
    invocation = _config_invocation(
        [("port", 9000), ("tensor-parallel-size", 4)],
        ["vllm", "serve", "m", "--config", "c.yaml", "-tp", "2"],
    )
    config = normalize(invocation, FACTS)
    assert values(config) == {"--port": "9000", "--tensor-parallel-size": "2"}
    tp_from_file = next(o for o in config.options if o.written == "tensor-parallel-size")
    assert tp_from_file.overridden and tp_from_file.location == Location(file="c.yaml", line=2)


def test_config_booleans_lists_and_nested_mappings() -> None:
    # load_config_file: true -> --key; false -> --no-key only where that option exists;
    # lists -> --key item...; mappings -> one JSON argument.
    invocation = _config_invocation(
        [
            ("enable-prefix-caching", False),
            ("enforce-eager", False),
            ("served-model-name", ["a", "b"]),
            ("kv-transfer-config", {"kv_connector": "OffloadingConnector"}),
            ("model", "org/m"),
        ],
        ["vllm", "serve"],
    )
    config = normalize(invocation, FACTS)
    assert values(config)["--enable-prefix-caching"] is False
    assert "--enforce-eager" not in values(config)
    assert values(config)["--served-model-name"] == ["a", "b"]
    assert config.json_values["--kv-transfer-config"] == {"kv_connector": "OffloadingConnector"}
    assert config.model == "org/m"


def test_underscored_false_config_key_is_dropped_like_vllm() -> None:
    # load_config_file looks up "--no-enable_prefix_caching" verbatim: no such option.
    invocation = _config_invocation([("enable_prefix_caching", False)], ["vllm", "serve", "m"])
    assert "--enable-prefix-caching" not in values(normalize(invocation, FACTS))


def test_env_last_assignment_wins_and_version_recorded() -> None:
    config = parse("A=1 A=2 vllm serve m")
    assert config.env["A"].value == "2"
    assert config.vllm_version == FACTS.version


def test_api_server_module_with_model_option() -> None:
    config = parse("python3 -m vllm.entrypoints.openai.api_server --model org/m --port 8000")
    assert config.model == "org/m" and values(config) == {"--port": "8000"}


def test_against_the_generated_0_32_0_table() -> None:
    from kvtool.releases import load_release

    facts = load_release("0.32.0")
    config = parse(
        "vllm serve m -tp 4 --kv_offloading_size=64 --no-enable-prefix-caching "
        "--calculate-kv-scales -O3 --device-memory-utilization 0.8",
        facts,
    )
    effective = values(config)
    assert effective["--tensor-parallel-size"] == "4"
    assert effective["--kv-offloading-size"] == "64"
    assert effective["--enable-prefix-caching"] is False
    assert effective["--optimization-level"] == "3"
    # version-gates.md §5: --device-memory-utilization is an alias from 0.31.0.
    assert effective["--gpu-memory-utilization"] == "0.8"
    # version-gates.md §4 row 3: --calculate-kv-scales is gone from 0.28.0.
    unknown = [o.flag for o in config.options if not o.known]
    assert unknown == ["--calculate-kv-scales"]
    assert config.problems == ()


def test_O3_on_0_10_2_is_a_compilation_level() -> None:
    # 0.10.2's table has no --optimization-level and -O aliases --compilation-config, so
    # vLLM's older rewrite "-O3" -> "-O 3" sets compilation level 3.
    from kvtool.releases import load_release

    config = parse("vllm serve m -O3", load_release("0.10.2"))
    assert values(config) == {"--compilation-config": 3}


def test_ambiguous_abbreviation_against_the_real_table() -> None:
    from kvtool.releases import load_release

    config = parse("vllm serve m --kv-offloading 8", load_release("0.32.0"))
    (problem,) = config.problems[:1]
    assert problem.message.startswith("ambiguous option: --kv-offloading could match")
    assert "--kv-offloading-backend" in problem.message


def test_word_after_an_unknown_flag_fills_the_model_first() -> None:
    # argparse sets unknown options aside; the next word still fills the positional model.
    config = parse("vllm serve --calculate-kv-scales org/m --kv-offload-gib 8")
    assert config.model == "org/m"
    assert {o.flag: o.value for o in config.options if not o.known} == {
        "--calculate-kv-scales": True,
        "--kv-offload-gib": "8",
    }


def test_a_conditional_occurrence_does_not_override_for_sure() -> None:
    from kvtool.audit.inputs import read_text

    (invocation,) = read_text(
        "vllm serve m --port 1 ${ALT:+--port 2} --enforce-eager --enforce-eager\n", "run.sh"
    )
    config = normalize(invocation, FACTS)
    ports = [(o.value, o.conditional, o.overridden) for o in config.options if o.flag == "--port"]
    assert ports == [("1", False, False), ("2", True, False)]
    eager = [o.overridden for o in config.options if o.flag == "--enforce-eager"]
    assert eager == [True, False]


def test_config_without_any_model_is_a_problem() -> None:
    # _pull_args_from_config: "No model specified!" when neither CLI nor file names one.
    invocation = _config_invocation([("port", 1)], ["vllm", "serve", "--config", "c.yaml"])
    assert normalize(invocation, FACTS).problems[0].message.startswith("No model specified!")
    with_model = _config_invocation([("model", "m")], ["vllm", "serve", "--config", "c.yaml"])
    assert normalize(with_model, FACTS).problems == ()
