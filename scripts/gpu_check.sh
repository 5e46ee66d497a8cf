#!/usr/bin/env bash
# GPU check for kvtool's connector worker pipeline (issue 14). Run from anywhere on a
# machine with an NVIDIA GPU and a python3 that has torch with CUDA; vLLM is not needed
# (the device machines' image has torch and pytest but not vLLM nor kvtool's other
# dependencies, and no network: this script installs nothing). Under 5 minutes:
#   1. the transfer-engine tests (CPU and CUDA round trips) with pytest;
#   2. scripts/bench/gpu_pipeline.py: KV tensors in each layout the engine accepts,
#      compute-stream "forward" kernels, stores after it on the side stream, loads
#      before the next one, asynchronous loads read only once polled done, every byte
#      verified on the device; host syncs per step; a synchronous load pipelined per
#      layer, read by a per-layer "forward" right after each layer's wait (every byte
#      checked), with CUDA event times showing the first layer's read starting before
#      the last layer's copy finished (and not so with one whole wait);
#      per layout, a typical host hit (1,024 tokens) loaded synchronously per layer
#      against recomputing it, with a stand-in forward (the kvtool.load_async default);
#      store (device -> pinned host) and load (host -> device)
#      GB/s against a plain pinned copy of the same bytes in the same run (target >= 0.8x).
# Without a CUDA device it exits 2 with one line on stderr. GPU_CHECK_DRY_RUN=1 runs
# step 2 on CPU instead (what the test suite does).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1

if [[ "${GPU_CHECK_DRY_RUN:-0}" == 1 ]]; then
  exec timeout 120 "$PYTHON" scripts/bench/gpu_pipeline.py --dry-run
fi
if ! "$PYTHON" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  echo "gpu_check: no CUDA device visible to torch ($PYTHON); nothing to check on this machine" >&2
  exit 2
fi

"$PYTHON" -c 'import torch; print("gpu_check:", torch.cuda.get_device_name(0), "torch", torch.__version__)'

echo "gpu_check: transfer tests"
timeout 120 "$PYTHON" -m pytest tests/connector/test_transfer.py -q -p no:cacheprovider --noconftest

echo "gpu_check: worker pipeline"
status=0
result=$(timeout 150 "$PYTHON" scripts/bench/gpu_pipeline.py --json) || status=$?
echo "$result"
"$PYTHON" - "$result" <<'PY'
import json, sys
sys.path.insert(0, "scripts/bench")
from gpu_pipeline import hit_lines, layered_lines
r = json.loads(sys.argv[1])
for name, p in r["layouts"].items():
    print(f"gpu_check: {name}: {p['steps']} steps, mismatched elements {p['mismatched_elements']}, "
          f"failed jobs {len(p['failed_jobs'])}, host syncs/step {p['host_syncs_per_step']}")
for line in layered_lines(r["layered_load"]):
    print("gpu_check:", line)
for line in hit_lines(r["hit_vs_recompute"]):
    print("gpu_check:", line)
b = r["bandwidth"]
print(f"gpu_check: store {b['store_d2h_gbps']} GB/s vs plain pinned {b['plain_d2h_gbps']} GB/s "
      f"= {b['store_ratio']}x; load {b['load_h2d_gbps']} GB/s vs {b['plain_h2d_gbps']} GB/s "
      f"= {b['load_ratio']}x (target >= 0.8; {b['bytes']} B, runs of {b['run_length']} blocks)")
print("gpu_check: problems: " + ("; ".join(r["problems"]) or "none"))
PY
exit "$status"
