#!/usr/bin/env bash
# GPU check for kvtool's connector transfer engine (issue 5). Run from anywhere on a
# machine with an NVIDIA GPU and a python3 that has torch with CUDA (the device
# machines' image has torch, pytest and rich but not kvtool's other dependencies,
# and no network: this script installs nothing). Finishes in well under 5 minutes:
#   1. the transfer-engine tests (CPU and CUDA round trips) with pytest;
#   2. scripts/bench/gather.py on CUDA: gathering scattered blocks into pinned host
#      memory vs one plain pinned device-to-host copy of the same bytes, same run.
# Prints the device-to-pinned-host GB/s of both and their ratio (target >= 0.8).
# Without a CUDA device it refuses with exit code 2 and says why.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi

if ! "$PYTHON" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  echo "gpu_check: no CUDA device visible to torch ($PYTHON); nothing to check on this machine" >&2
  exit 2
fi

export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
"$PYTHON" -c 'import torch; print("gpu_check:", torch.cuda.get_device_name(0), "torch", torch.__version__)'

echo "gpu_check: transfer tests"
timeout 120 "$PYTHON" -m pytest tests/connector/test_transfer.py -q -p no:cacheprovider --noconftest

echo "gpu_check: gather benchmark (device -> pinned host)"
result=$(timeout 150 "$PYTHON" scripts/bench/gather.py --device cuda --json)
echo "$result"
"$PYTHON" - "$result" <<'PY'
import json, sys
r = json.loads(sys.argv[1])
ok = r["gather_vs_contiguous_ratio"] >= 0.8
print(f"gpu_check: {r['device']}: gather into pinned host {r['gather_gbps']} GB/s vs plain pinned "
      f"copy {r['contiguous_gbps']} GB/s = {r['gather_vs_contiguous_ratio']}x "
      f"(target >= 0.8: {'met' if ok else 'MISSED'})")
PY
