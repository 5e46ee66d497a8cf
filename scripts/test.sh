#!/usr/bin/env bash
# The whole test suite, from a clean checkout: every install step lives here.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/setup_system.sh
bash scripts/setup_vllm_env.sh
bash scripts/setup_vllm_scheduler_env.sh
# The scheduler env was just built, so its harness cases must run: a missing one fails
# them instead of skipping (unless the build was skipped on purpose).
if [ "${KVTOOL_SKIP_VLLM_SCHED_ENV:-0}" != "1" ]; then
    export KVTOOL_REQUIRE_VLLM_SCHED_ENV=1
fi
.venv/bin/ruff check kvtool scripts tests
.venv/bin/mypy
.venv/bin/pytest "$@"
