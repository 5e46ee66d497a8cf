#!/usr/bin/env bash
# System packages the registry and container tests start (owned by the inspect-image work).
set -euo pipefail
