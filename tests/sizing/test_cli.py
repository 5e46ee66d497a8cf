"""``kvtool size`` as a user runs it: output formats, paste-ready lines, and bad input."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import CliResult
from tests.sizing.deepseek_v4_configs import write_config

CONFIGS = Path(__file__).parent / "configs"
LLAMA_8B = CONFIGS / "llama-3.1-8b.config.json"


def test_json_has_the_documented_keys(kvtool_cli) -> None:  # type: ignore[no-untyped-def]
    result: CliResult = kvtool_cli(
        "size",
        "--model",
        "llama-3.1-70b",
        "--tp",
        "8",
        "--host-ram-gib",
        "1900",
        "--output-format",
        "json",
        "--vllm-version",
        "0.32.0",  # the release the goldens were derived for
    )
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    # G-T2, G-N5 and G-K4 in sizing.md §4.3.
    assert data["kv_bytes_per_token"] == 327_680
    assert data["kv_bytes_per_token_per_rank"] == 40_960
    assert data["bytes_per_block"] == 16 * 40_960
    assert data["kv_offloading_size_gib"] == 950.0
    assert data["l1_capacity_gib"] == 118.75
    assert data["cpu_tier_tokens"] == 3_112_960
    assert "explain" not in data
    assert [w["code"] for w in data["warnings"]] == ["kaito-l1-divided-by-tp"]


def test_json_explain_lists_the_arithmetic(kvtool_cli) -> None:  # type: ignore[no-untyped-def]
    result = kvtool_cli("size", "--model", "deepseek-v3", "--output-format", "json", "--explain")
    lines = json.loads(result.stdout)["explain"]
    assert any("kv_lora_rank + qk_rope_head_dim = 576" in line["formula"] for line in lines)


def test_text_table_and_explain_go_to_stdout(kvtool_cli) -> None:  # type: ignore[no-untyped-def]
    result = kvtool_cli("size", "--model", "gemma-3-12b", "--cpu-tier-gib", "100", "--explain")
    assert result.exit_code == 0
    assert result.stderr == ""
    assert "393,216" in result.stdout  # G-B6, all layers
    assert "65,536" in result.stdout  # G-B6, full-attention layers only
    assert "Arithmetic" in result.stdout
    assert "[sliding-window-offload]" in result.stdout


def test_local_file_directory_and_catalog_agree(kvtool_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    model_dir = tmp_path / "Llama-3.1-8B"
    model_dir.mkdir()
    shutil.copy(LLAMA_8B, model_dir / "config.json")
    outputs = []
    for model in (str(LLAMA_8B), str(model_dir), "meta-llama/Llama-3.1-8B"):
        result = kvtool_cli("size", "--model", model, "--tp", "2", "--output-format", "json")
        assert result.exit_code == 0, result.stderr
        data = json.loads(result.stdout)
        outputs.append({k: data[k] for k in ("kv_bytes_per_token", "kv_bytes_per_token_per_rank")})
    assert outputs == [{"kv_bytes_per_token": 131_072, "kv_bytes_per_token_per_rank": 65_536}] * 3


def test_emit_flags(kvtool_cli) -> None:  # type: ignore[no-untyped-def]
    result = kvtool_cli(
        "size", "--model", "llama-3.1-70b", "--tp", "8", "--host-ram-gib", "1900", "--emit", "flags"
    )
    assert result.exit_code == 0
    # Each line says which program it is for, as a comment a shell script keeps.
    assert result.stdout.splitlines() == [
        "# vLLM (vllm serve), native CPU offload:",
        "--kv-offloading-size 950",
        "# LMCache MP server (with --kv-offloading-backend lmcache):",
        "lmcache server --chunk-size 256 --l1-use-lazy --l1-init-size-gb 1 --l1-size-gb 950 "
        "--eviction-policy LRU",
    ]


def test_emit_env_is_per_rank(kvtool_cli) -> None:  # type: ignore[no-untyped-def]
    # LMCACHE_MAX_LOCAL_CPU_SIZE is per TP worker (sizing.md §2.4, §5 row 1): 400 / 8 = 50.
    result = kvtool_cli(
        "size", "--model", "llama-3.1-70b", "--tp", "8", "--cpu-tier-gib", "400", "--emit", "env"
    )
    assert result.stdout.splitlines() == [
        "# LMCache in-process (LMCacheConnectorV1), per rank:",
        "LMCACHE_CHUNK_SIZE=256",
        "LMCACHE_LOCAL_CPU=True",
        "LMCACHE_MAX_LOCAL_CPU_SIZE=50",
    ]


def test_emit_rounds_sizes_up(kvtool_cli) -> None:  # type: ignore[no-untyped-def]
    # 4 sessions x 100k Llama-70B tokens need 25,000 chunks of 5 MiB = 122.0703 GiB.
    result = kvtool_cli(
        "size",
        "--model",
        "llama-3.1-70b",
        "--tp",
        "8",
        "--sessions",
        "4",
        "--context-len",
        "100000",
        "--emit",
        "flags",
        "--vllm-version",
        "0.32.0",  # 16-token blocks (5 MiB chunks) at 0.32.0
    )
    assert result.stdout.splitlines()[1] == "--kv-offloading-size 122.08"


@pytest.mark.parametrize(
    ("tier", "flag"), [("12345.641", "12345.65"), ("25.8741", "25.88"), ("3.03", "3.03")]
)
def test_emit_never_rounds_a_size_down(kvtool_cli, tier: str, flag: str) -> None:  # type: ignore[no-untyped-def]
    # Above 10,000 GiB six significant digits would drop the second decimal (12345.6).
    result = kvtool_cli(
        "size", "--model", "llama-3.1-8b", "--cpu-tier-gib", tier, "--emit", "flags"
    )
    assert result.stdout.splitlines()[1] == f"--kv-offloading-size {flag}"
    assert float(flag) >= float(tier)


def _write_config(tmp_path: Path, **changes: object) -> Path:
    config = json.loads(LLAMA_8B.read_text())
    for key, value in changes.items():
        if value is None:
            config.pop(key)
        else:
            config[key] = value
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return path


def _fails_naming(result: CliResult, *words: str) -> None:
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.startswith("kvtool: error: ")
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.stderr
    for word in words:
        assert word in result.stderr


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--host-ram-gib", "-64"], ["--host-ram-gib"]),
        (["--cpu-tier-gib", "0"], ["--cpu-tier-gib"]),
        (["--utilization", "1.5"], ["--utilization"]),
        (["--tp", "3"], ["--tp 3", "num_attention_heads 32"]),
        (["--tp", "0"], ["--tp"]),
        (["--tp", "4", "--dcp", "3"], ["--dcp 3", "--tp 4"]),
        (["--gpu-kv-gib", "10", "--num-gpu-blocks", "5"], ["--gpu-kv-gib", "--num-gpu-blocks"]),
        (["--kv-cache-dtype", "int4"], ["--kv-cache-dtype", "int4"]),
        (["--emit", "flags"], ["--emit flags", "--cpu-tier-gib"]),
    ],
)
def test_bad_deployment_exits_2(kvtool_cli, args: list[str], words: list[str]) -> None:  # type: ignore[no-untyped-def]
    _fails_naming(kvtool_cli("size", "--model", "llama-3.1-8b", *args), *words)


def test_kv_heads_that_tp_cannot_split(kvtool_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = _write_config(tmp_path, num_key_value_heads=6, num_attention_heads=24, hidden_size=3072)
    _fails_naming(kvtool_cli("size", "--model", str(path), "--tp", "4"), "num_key_value_heads 6")


@pytest.mark.parametrize("field", ["num_hidden_layers", "num_attention_heads", "model_type"])
def test_missing_config_field(kvtool_cli, tmp_path: Path, field: str) -> None:  # type: ignore[no-untyped-def]
    path = _write_config(tmp_path, **{field: None})
    _fails_naming(kvtool_cli("size", "--model", str(path)), f"'{field}'", str(path))


def test_missing_head_dim_and_indivisible_hidden_size(kvtool_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = _write_config(tmp_path, hidden_size=4000, num_attention_heads=48)
    _fails_naming(kvtool_cli("size", "--model", str(path)), "head_dim", "hidden_size 4000")


@pytest.mark.parametrize(
    "changes",
    [
        {"num_key_value_heads": "eight"},
        # Optional counts are read with the same care as required ones.
        {"num_nextn_predict_layers": "one"},
        {"use_sliding_window": True, "sliding_window": 4096, "max_window_layers": "x"},
        {"model_type": "jamba", "attn_layer_period": 8, "attn_layer_offset": -1},
    ],
)
def test_wrongly_typed_field(kvtool_cli, tmp_path: Path, changes: dict[str, object]) -> None:  # type: ignore[no-untyped-def]
    path = _write_config(tmp_path, **changes)
    field = next(key for key in reversed(list(changes)) if key != "model_type")
    _fails_naming(kvtool_cli("size", "--model", str(path)), f"'{field}'")


def test_unsupported_architecture(kvtool_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = _write_config(tmp_path, model_type="bert", architectures=["BertModel"])
    _fails_naming(kvtool_cli("size", "--model", str(path)), "model_type 'bert'", "supported:")


def test_deepseek_v4_prints_vllms_groups(kvtool_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = write_config(tmp_path, "deepseek-v4-flash")
    result = kvtool_cli("size", "--model", str(path), "--gpu-kv-gib", "80")
    assert result.exit_code == 0
    assert "KV cache groups (5)" in result.stdout
    assert "FLASHMLA_SPARSE" in result.stdout


def test_deepseek_v4_bfloat16_is_refused_as_vllm_refuses_it(kvtool_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = write_config(tmp_path, "deepseek-v4-flash")
    result = kvtool_cli("size", "--model", str(path), "--kv-cache-dtype", "bfloat16")
    _fails_naming(result, "bfloat16", "fp8_ds_mla", "_resolve_dsv4_kv_cache_dtype")


def test_deepseek_v4_short_compress_ratios_names_the_field(kvtool_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = write_config(tmp_path, "deepseek-v4-flash", compress_ratios=[4, 128])
    result = kvtool_cli("size", "--model", str(path))
    _fails_naming(result, "compress_ratios", "num_hidden_layers is 43")


def test_deepseek_v4_unknown_ratio_names_the_field(kvtool_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = write_config(tmp_path, "deepseek-v4-flash", compress_ratios=[8] * 44)
    result = kvtool_cli("size", "--model", str(path))
    _fails_naming(result, "compress_ratios", "ratio 8")


def test_unmodelled_architecture_names_what_is_missing(kvtool_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # MiniMax-M3's sparse VL model as its NVFP4 checkpoint declares it (model_type
    # minimax_m3_vl, MiniMaxM3SparseForConditionalGeneration, registered in vLLM 0.32);
    # kvtool does not model its indexer caches yet, and says which parts are missing.
    path = _write_config(
        tmp_path,
        architectures=["MiniMaxM3SparseForConditionalGeneration"],
        model_type="minimax_m3_vl",
    )
    _fails_naming(
        kvtool_cli("size", "--model", str(path)),
        "model_type 'minimax_m3_vl'",
        "lightning-indexer key cache",
        "/vllm/models/minimax_m3/nvidia/model.py",
        "supported:",
    )


def test_invalid_json_and_unknown_name(kvtool_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "config.json"
    path.write_text("{not json")
    _fails_naming(kvtool_cli("size", "--model", str(path)), "not valid JSON", str(path))
    _fails_naming(kvtool_cli("size", "--model", "no-such-model"), "no-such-model", "catalog")
    empty = tmp_path / "empty"
    empty.mkdir()
    _fails_naming(kvtool_cli("size", "--model", str(empty)), "no config.json")
