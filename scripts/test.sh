#!/usr/bin/env bash
# The whole test suite, from a clean checkout: every install step lives here.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/setup_system.sh
bash scripts/setup_vllm_env.sh
.venv/bin/ruff check kvtool scripts tests
.venv/bin/mypy
.venv/bin/pytest "$@"
