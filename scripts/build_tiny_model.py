"""Build a tiny random-weight Llama and its tokenizer locally, with no Hub access.

Run with the vLLM environment's python (it needs ``transformers`` and ``tokenizers``)::

    .venv-vllm/bin/python scripts/build_tiny_model.py OUT_DIR

The shape follows /work/shared/reference/vllm-on-cpu.md §2: the CPU attention backend
accepts only certain head sizes (32 here) and block sizes that are multiples of 32.
Building takes a few seconds; an existing complete model in OUT_DIR is reused.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

# Varied English so the byte-level BPE learns a few hundred merges; repeated so the
# trainer sees each pair often enough.
TRAINING_SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "A journey of a thousand miles begins with a single step.",
    "To be or not to be, that is the question.",
    "All that glitters is not gold, and not all who wander are lost.",
    "The rain in Spain stays mainly in the plain.",
    "Operators size the host cache before they offload the KV blocks.",
    "Every block of keys and values is copied out before it is recycled.",
    "Numbers like 0 1 2 3 4 5 6 7 8 9 appear in prompts too.",
]
TRAINING_REPEATS = 20
VOCAB_TARGET = 512
SPECIAL_TOKENS = ["<unk>", "<s>", "</s>", "<pad>"]
WEIGHT_SEED = 0
# Marks a complete build; written last so an interrupted build is redone.
DONE_MARKER = ".kvtool-tiny-model-done"


def build_tiny_model(out_dir: Path) -> Path:
    """Write tokenizer and bf16 safetensors weights to ``out_dir``; return it."""
    if (out_dir / DONE_MARKER).exists():
        return out_dir
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out_dir.mkdir(parents=True, exist_ok=True)
    bpe = Tokenizer(models.BPE(unk_token="<unk>"))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_TARGET,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    bpe.train_from_iterator(
        (s for _ in range(TRAINING_REPEATS) for s in TRAINING_SENTENCES), trainer=trainer
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        model_max_length=2048,
    )
    tokenizer.save_pretrained(str(out_dir))

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=2048,
        rms_norm_eps=1e-6,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
    )
    torch.manual_seed(WEIGHT_SEED)
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(str(out_dir), safe_serialization=True)
    (out_dir / DONE_MARKER).write_text("ok\n")
    return out_dir


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path, help="directory to write the model into")
    args = parser.parse_args(argv)
    print(build_tiny_model(args.out_dir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
