#!/usr/bin/env bash
# Native CPU KV offload on vLLM 0.32.0: 4 x H100, 256 GiB of host RAM for KV in total
# (--kv-offloading-size is the total across all tensor-parallel ranks).
set -euo pipefail

exec vllm serve meta-llama/Llama-3.1-70B-Instruct \
  --tensor-parallel-size 4 \
  --kv-offloading-backend native \
  --kv-offloading-size 256 \
  --max-model-len 32768 \
  --port 8000
