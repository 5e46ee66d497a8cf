#!/usr/bin/env bash
# The suite's vLLM environment, .venv-vllm (owned by the connector end-to-end work).
set -euo pipefail
