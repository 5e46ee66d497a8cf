#!/usr/bin/env bash
# Llama-3.1-70B on 4 x H100 with LMCache CPU offload.
# Carried over from our vLLM 0.22 runbook; audit it before moving to 0.32.0:
#   kvtool audit examples/lmcache-tp4.sh --vllm-version 0.32.0
set -euo pipefail

MODEL=meta-llama/Llama-3.1-70B-Instruct
export LMCACHE_MAX_LOCAL_CPU_SIZE=40   # GB of pinned host RAM per GPU
export LMCACHE_CHUNK_SIZE=256

# --kv-offloading-size is sized per GPU here, like the LMCache env var above.
exec vllm serve "$MODEL" \
  --tensor-parallel-size 4 \
  --kv-offloading-backend lmcache \
  --kv-offloading-size 40 \
  --disable-hybrid-kv-cache-manager \
  --kv-cache-dtype fp8 \
  --calculate-kv-scales \
  --max-model-len 32768 \
  ${ENFORCE_EAGER:+--enforce-eager} \
  --port 8000
