"""kvtool's block size, KV cache groups, pool blocks and token capacity equal vLLM 0.32's.

Every case is a real config.json shape (the cited catalog entries in
``rules/models/catalog.toml``, or a cited shape written in the goldens) at TP 1 and 8
(a smaller TP where 8 does not divide the heads), with the model's own KV dtype and with fp8.
One subprocess in the suite's vLLM environment (``tests/sizing/vllm_kv_layout.py``) asks
vLLM's own ``ModelConfig``, spec classes, ``Platform._align_hybrid_block_size``,
``get_kv_cache_groups``, ``get_kv_cache_config_from_groups`` and
``get_kv_cache_capacity``; no engine, no GPU. The attention backend is the one kvtool
picks for an H200 (its table cites vLLM's priorities); vLLM then decides the rest.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from kvtool.errors import KvtoolError
from kvtool.models.catalog import find_entry
from kvtool.sizing import SizingReport, compute, load_model_spec, make_deployment
from tests.sizing.deepseek_v4_configs import DEEPSEEK_V4
from tests.sizing.test_vllm_block_goldens import (
    CHATGLM3_6B,
    COMMAND_R7B,
    FALCON_H1_7B,
    KIMI_K3,
    MIMO_V2_FLASH,
)
from tests.vllm_env import vllm_python, vllm_subprocess_env

pytestmark = pytest.mark.vllm

SCRIPT = Path(__file__).with_name("vllm_kv_layout.py")
REGISTRY_KEY = "__model_registry__"  # vllm_kv_layout.REGISTRY_KEY (run in another env)
GIB = 1 << 30
KV_MEMORY_GIB = 40
MAX_MODEL_LEN = 4096
IN_FLIGHT_TOKENS = 8192

# Catalog entries, one per architecture class the hybrid manager treats differently.
MODELS = {
    "llama-3.1-8b": None,  # dense GQA
    "deepseek-v3": None,  # MLA
    "gpt-oss-120b": None,  # sliding window + full, 2 groups
    "qwen3-coder-next": None,  # Qwen3-Next: Gated DeltaNet + full attention
    # Qwen3.5's text part (qwen3_5.py imports torchvision through qwen3_vl.py for the
    # vision tower; vllm_kv_layout.py stubs it, as the text model never calls it).
    "qwen3.5-9b": {"architectures": ["Qwen3_5ForCausalLM"]},
    "nemotron-h-8b": None,  # Mamba-2 + attention
    # Gemma 3's text part as Gemma3ForCausalLM: vLLM's CPU wheel cannot inspect the
    # multimodal classes offline, and the KV cache is the text model's.
    "gemma-3-12b": {"architectures": ["Gemma3ForCausalLM"]},
    # Llama 4's text part: chunked local attention + full, grouped by the hybrid manager.
    "llama-4-scout": {"architectures": ["Llama4ForCausalLM"]},
    "glm-4.5-air": None,  # GLM-4.x MoE: GQA with partial rotary
    "minimax-m2": None,  # GQA
    # Gemma 4 text part: sliding and full layers with different page sizes.
    "gemma-4-31b": {"architectures": ["Gemma4ForCausalLM"]},
    # Sparse MLA: the latent and the DSA indexer's keys on every layer, one group.
    "deepseek-v3.2": None,
    "glm-5": None,
    # GLM-5.2's shared indexer (index_topk_freq 4, index_skip_topk_offset 3): an indexer
    # cache on layers 0-2 and every 4th layer from 6 only.
    "glm-5.2-shared-indexer": None,
    "kimi-linear-48b": None,  # KDA state + MLA: a padded state page, MLA-hybrid block
}
# Cases that are a catalog entry with some fields changed: name -> (entry, fields).
VARIANTS = {
    "glm-5.2-shared-indexer": ("glm-5", {"index_topk_freq": 4, "index_skip_topk_offset": 3}),
}


def _blocks_listed(config: dict[str, Any]) -> dict[str, Any]:
    # nvidia/NVIDIA-Nemotron-3-Ultra-550B-A55B config.json (copied in ai-dynamo/aiconfigurator
    # aic-core/src/aiconfigurator_core/model_configs) lists layers_block_type, no pattern.
    names = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}
    pattern = config.pop("hybrid_override_pattern")
    return {**config, "layers_block_type": [names[c] for c in pattern]}


def _modelopt_fp8_kv(config: dict[str, Any]) -> dict[str, Any]:
    # ModelOpt >= 0.31 config.json quantization_config, as in nvidia/Qwen3.5-397B-A17B-NVFP4
    # (copied in ai-dynamo/aiconfigurator): a kv_cache_scheme that makes auto mean fp8.
    kv = {"dynamic": False, "num_bits": 8, "type": "float"}
    quant = {"quant_method": "modelopt", "quant_algo": "FP8", "kv_cache_scheme": kv}
    return {**config, "quantization_config": quant}


# Real config shapes that differ from a catalog entry in the fields shown.
RESHAPED = {
    "nemotron-3-blocks-listed": ("nemotron-h-8b", _blocks_listed),
    "llama-3.1-8b-modelopt-fp8-kv": ("llama-3.1-8b", _modelopt_fp8_kv),
}
# Real config shapes written in the goldens (each cites where it was seen).
WRITTEN = {
    "falcon-h1-7b": FALCON_H1_7B,  # attention + Mamba-2 in every layer
    "mimo-v2-flash": MIMO_V2_FLASH,  # two page sizes; K and V of unequal width
    "command-r7b": COMMAND_R7B,  # Cohere 2: one global layer in four, window + 1
    "chatglm3-6b": CHATGLM3_6B,  # num_layers, multi_query_group_num
    # The multimodal wrapper as served: vLLM asks its text model's state shapes.
    "kimi-k3": KIMI_K3,
    # DeepSeek-V4: per-layer compressed, sliding-window, compressor and indexer caches,
    # packed block-outermost into groups of different block sizes.
    **DEEPSEEK_V4,
}
MODELS.update({name: None for name in [*RESHAPED, *WRITTEN]})
# The wide TP where 8 does not divide the heads (vLLM refuses such a TP).
WIDE_TP = {"falcon-h1-7b": 2}
CASES = [
    (m, tp, dt) for m in MODELS for tp in (1, WIDE_TP.get(m, 8)) for dt in ("auto", "fp8")
]
# Cases vLLM cannot start with its own block on an H200 (FA4's fp8 kernel for Gemma 4's
# 512-dim layers takes exactly 64-token pages; kvtool refuses them): pinned here to a
# block that works at both TP sizes, as an operator would.
PINNED_BLOCK = {("gemma-4-31b", "fp8"): 64}
# Cases vLLM refuses and kvtool must refuse alike, with the backend vLLM is asked about:
# DeepSeek-V4's fp8_ds_mla layout on FlashMLA takes fp8 KV caches only.
REFUSED = [("deepseek-v4-flash", 1, "bfloat16", "FLASHMLA_SPARSE")]
REFUSAL = "fp8_ds_mla layout only supports fp8"  # vLLM's words, which kvtool repeats


def _config(name: str) -> dict[str, Any]:
    if name in WRITTEN:
        return dict(WRITTEN[name])
    if name in RESHAPED:
        base, reshape = RESHAPED[name]
        return reshape(_config(base))
    entry_name, changed = VARIANTS.get(name, (name, {}))
    entry = find_entry(entry_name)
    assert entry is not None
    config = {**entry.config, **changed}
    override = MODELS[name]
    if override is not None:
        text = dict(config.pop("text_config"))
        config = {**text, **override, "torch_dtype": config.get("torch_dtype", "bfloat16")}
    return config


def _case_id(name: str, tp: int, dtype: str) -> str:
    return f"{name}-tp{tp}-{dtype}"


def _kvtool(model_dir: Path, tp: int, dtype: str) -> SizingReport:
    return compute(
        load_model_spec(str(model_dir)),
        make_deployment(
            tp=tp,
            kv_cache_dtype=dtype,
            block_size=PINNED_BLOCK.get((model_dir.name, dtype)),
            gpu_kv_gib=KV_MEMORY_GIB,
            context_len=MAX_MODEL_LEN,
            max_in_flight_tokens=IN_FLIGHT_TOKENS,
        ),
    )


@pytest.fixture(scope="module")
def vllm_layouts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    python = vllm_python()
    root = tmp_path_factory.mktemp("vllm-kv-layout")
    cases = []
    refused_backends = {(name, tp, dtype): backend for name, tp, dtype, backend in REFUSED}
    for name, tp, dtype in [*CASES, *refused_backends]:
        model_dir = root / name
        model_dir.mkdir(exist_ok=True)
        (model_dir / "config.json").write_text(json.dumps(_config(name)))
        backend = refused_backends.get((name, tp, dtype))
        if backend is None:
            backend = _kvtool(model_dir, tp, dtype).attention_backend
        cases.append(
            {
                "id": _case_id(name, tp, dtype),
                "model_dir": str(model_dir),
                "tp": tp,
                "kv_cache_dtype": dtype,
                "backend": backend,
                "block_size": PINNED_BLOCK.get((name, dtype)),
                "max_model_len": MAX_MODEL_LEN,
                "max_in_flight_tokens": IN_FLIGHT_TOKENS,
                "kv_memory_bytes": KV_MEMORY_GIB * GIB,
            }
        )
    cases_file = root / "cases.json"
    cases_file.write_text(json.dumps(cases))
    done = subprocess.run(
        [str(python), str(SCRIPT), str(cases_file)],
        capture_output=True,
        text=True,
        timeout=900,
        env=vllm_subprocess_env(root),
        cwd=root,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    layouts: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    for case_id, case in layouts.items():
        if case_id != REGISTRY_KEY:
            case["root"] = str(root)
    return layouts


@pytest.mark.parametrize(("name", "tp", "dtype"), CASES)
def test_kvtool_matches_vllm_layout(
    vllm_layouts: dict[str, Any], name: str, tp: int, dtype: str
) -> None:
    theirs = vllm_layouts[_case_id(name, tp, dtype)]
    assert "error" not in theirs, theirs.get("error")
    ours = _kvtool(Path(theirs["root"]) / name, tp, dtype)
    assert ours.model_dtype == theirs["model_dtype"]
    assert ours.block_size == theirs["block_size"], ours.block_size_reason
    assert sorted(
        (
            g.kind,
            g.layers,
            g.block_size,
            g.page_bytes,
            sorted((p.page_bytes, p.layers) for p in g.layer_pages),
        )
        for g in ours.kv_cache_groups
    ) == sorted(
        (
            g["kind"],
            g["layers"],
            g["block_size"],
            g["page_bytes"],
            sorted((page, layers) for page, layers in g["layer_pages"]),
        )
        for g in theirs["groups"]
    )
    assert ours.num_gpu_blocks == theirs["num_blocks"]
    assert ours.gpu_tier_tokens == theirs["capacity_tokens"]
    assert ours.state_page_bytes == theirs["state_page_bytes"]


@pytest.mark.parametrize(("name", "tp", "dtype", "backend"), REFUSED)
def test_kvtool_refuses_what_vllm_refuses(
    vllm_layouts: dict[str, Any], name: str, tp: int, dtype: str, backend: str
) -> None:
    theirs = vllm_layouts[_case_id(name, tp, dtype)]
    assert REFUSAL in theirs.get("error", ""), theirs
    with pytest.raises(KvtoolError, match=f"{backend}, whose {REFUSAL}"):
        _kvtool(Path(theirs["root"]) / name, tp, dtype)


def test_every_layout_row_cites_a_model_file_of_the_vllm_release() -> None:
    from kvtool.resources import read_table, rules_dir
    from kvtool.sizing.hf_config import LAYOUTS_FILE, layout_rows, unmodelled_rows

    python = vllm_python()
    located = subprocess.run(
        [
            str(python),
            "-c",
            "import vllm; print(vllm.__file__); print(vllm.__version__)",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    origin, version = located.stdout.split()[-2:]
    # The citations (and the refusal's source link) are read at the suite's wheel release.
    assert read_table(rules_dir() / LAYOUTS_FILE)["vllm_release"] == version.split("+")[0]
    package = Path(origin).parent
    models_dir = package / "model_executor" / "models"
    for model_type, row in {**layout_rows(), **unmodelled_rows()}.items():
        cited = row["vllm"].split()[0].rstrip(":")
        # A bare file name is under model_executor/models; a path is under the package
        # (vLLM 0.32 serves Kimi-Linear from vllm/models/kimi_k3/).
        where = package if "/" in cited else models_dir
        assert (where / cited).is_file(), f"{model_type}: {cited} not in {where}"


def test_release_table_registry_is_vllms_own(vllm_layouts: dict[str, Any]) -> None:
    # The 0.32.0 table's model registry (read from the wheel's source by the generator)
    # equals what vLLM's own registry module holds when imported.
    from kvtool.releases import load_release

    registry = load_release("0.32.0").model_registry
    assert registry is not None
    theirs = vllm_layouts[REGISTRY_KEY]
    transformers = {k: v[1] for k, v in theirs["all"].items() if v[0] == "transformers"}
    assert registry.transformers_backend == transformers
    assert set(registry.native) == set(theirs["all"]) - set(transformers)
    assert registry.previously_supported == theirs["previous"]
