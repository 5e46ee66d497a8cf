"""DeepSeek-V4 config.json fields that decide its KV cache, as the real configs have them.

Written for these tests with only the fields that matter, in the shape seen in
ai-dynamo/aiconfigurator @ 095f58a51c4ca8e61b66ec108d86f223f8d559ce,
aic-core/src/aiconfigurator_core/model_configs/deepseek-ai--DeepSeek-V4-Flash_config.json
and deepseek-ai--DeepSeek-V4-Pro_config.json (``compress_ratios`` has one entry per
decoder layer plus one for the MTP layer).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

_COMMON: dict[str, Any] = {
    "architectures": ["DeepseekV4ForCausalLM"],
    "model_type": "deepseek_v4",
    "torch_dtype": "bfloat16",
    "head_dim": 512,
    "qk_rope_head_dim": 64,
    "num_key_value_heads": 1,
    "index_head_dim": 128,
    "index_n_heads": 64,
    "index_topk": 512,
    "sliding_window": 128,
    "num_nextn_predict_layers": 1,
    "max_position_embeddings": 1048576,
    "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]},
}

DEEPSEEK_V4: dict[str, dict[str, Any]] = {
    "deepseek-v4-flash": {
        **_COMMON,
        "num_hidden_layers": 43,
        "num_attention_heads": 64,
        "hidden_size": 4096,
        "compress_ratios": [0, 0] + [4, 128] * 20 + [4, 0],
    },
    "deepseek-v4-pro": {
        **_COMMON,
        "num_hidden_layers": 61,
        "num_attention_heads": 128,
        "hidden_size": 7168,
        "compress_ratios": [128, 128] + [4, 128] * 29 + [4, 0],
    },
}


def write_config(directory: Path, name: str, **changes: Any) -> Path:
    """``name``'s fields (with ``changes``) as ``directory/config.json``."""
    path = directory / "config.json"
    path.write_text(json.dumps({**DEEPSEEK_V4[name], **changes}))
    return path
