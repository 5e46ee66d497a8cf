"""Hybrid geometry: a pinned block below the hybrid block (SZ020), LMCache's MP chunk
against the block (SZ021), and blocks too large for short prompts (SZ022).

The block is the sizing package's (checked against vLLM 0.32's own code by
tests/sizing/test_vllm_end_to_end.py): Qwen3-Next at TP 1 runs with 544-token blocks.
vLLM raises a pinned --block-size rather than refusing it
(https://github.com/vllm-project/vllm/blob/v0.32.0/vllm/platforms/interface.py,
_align_hybrid_block_size: "if cache_config.block_size < attn_block_size"); LMCache's MP
adapter asserts chunk_size % vllm_block_size == 0
(https://github.com/LMCache/LMCache/blob/v0.5.6/lmcache/integration/vllm/vllm_multi_process_adapter.py,
LMCache #4782, #4094).
"""

from __future__ import annotations

import msgspec
import pytest

from kvtool.audit.model import Location, PodContainer, ServeConfig, ServeOption, SourceToken
from kvtool.sizing import load_model_spec, make_deployment
from kvtool.sizing.facts import sizing_facts
from kvtool.sizing.kv_plan import plan_kv_cache
from tests.audit.rulekit import codes, config, ktc, only, opt, run

HYBRID = "Qwen/Qwen3-Coder-Next"  # qwen3_next: Gated DeltaNet + attention
DENSE = "meta-llama/Llama-3.1-8B-Instruct"


def _block(model: str, **deployment: object) -> int:
    spec = load_model_spec(model)
    plan = plan_kv_cache(spec, make_deployment(**deployment), sizing_facts())
    return plan.block.block_size


def _mp(server_args: str | None = None) -> ServeOption:
    extra: dict[str, object] = {"lmcache.mp.autostart": True}
    if server_args is not None:
        extra["lmcache.mp.autostart.server_args"] = server_args
    return ktc(
        kv_connector="LMCacheMPConnector", kv_role="kv_both", kv_connector_extra_config=extra
    )


# -- SZ020 ----------------------------------------------------------------------------


def test_a_pinned_block_below_the_hybrid_block_is_raised() -> None:
    raised = _block(HYBRID, block_size=256)
    assert raised > 256
    finding = only(run(config("0.32.0", opt("--block-size", "256"), model=HYBRID)), "SZ020")
    assert finding.severity.value == "warning" and finding.evidence["block_size"] == raised
    assert f"blocks of {raised} tokens" in finding.message


def test_a_pinned_block_vllm_keeps_is_quiet() -> None:
    needed = _block(HYBRID)
    pinned = opt("--block-size", str(needed))
    assert "SZ020" not in codes(run(config("0.32.0", pinned, model=HYBRID)))
    assert "SZ020" not in codes(run(config("0.32.0", opt("--block-size", "32"), model=DENSE)))
    # A model the sizing package cannot read is left alone (CN040 says so).
    unknown = config("0.32.0", opt("--block-size", "16"), model="my-org/private-hybrid")
    assert "SZ020" not in codes(run(unknown))


# -- SZ021 ----------------------------------------------------------------------------


def test_the_default_server_chunk_against_a_hybrid_block_is_a_warning() -> None:
    block = _block(HYBRID)
    default_chunk = sizing_facts().lmcache_chunk_size
    assert default_chunk % block  # 256 is no multiple of 544
    finding = only(run(config("0.32.0", _mp(), model=HYBRID)), "SZ021")
    assert finding.severity.value == "warning"
    assert finding.evidence == {"block_size": block, "chunk_size": default_chunk}


@pytest.mark.parametrize("written", ["--chunk-size 256", "--l1-size-gb 20 --chunk-size=256"])
def test_a_written_chunk_that_is_no_multiple_is_an_error(written: str) -> None:
    finding = only(run(config("0.32.0", _mp(written), model=HYBRID)), "SZ021")
    assert finding.severity.value == "error" and finding.flag == "lmcache.mp.autostart.server_args"


def test_chunks_that_are_multiples_are_quiet() -> None:
    block = _block(HYBRID)
    fits = _mp(f"--chunk-size {2 * block}")
    assert "SZ021" not in codes(run(config("0.32.0", fits, model=HYBRID)))
    # A dense model's block 16 divides the default chunk; so does a pinned 64.
    assert "SZ021" not in codes(run(config("0.32.0", _mp(), model=DENSE)))
    pinned = opt("--block-size", "64")
    assert "SZ021" not in codes(run(config("0.32.0", _mp(), pinned, model=DENSE)))
    # A pinned block that does not divide the chunk fires for a dense model too.
    odd = opt("--block-size", "48")
    assert only(run(config("0.32.0", _mp("--chunk-size 256"), odd, model=DENSE)), "SZ021")
    # Only the MP connector asserts it.
    native = opt("--kv-offloading-size", "10")
    assert "SZ021" not in codes(run(config("0.32.0", native, model=HYBRID)))


# -- SZ022 ----------------------------------------------------------------------------

PREFIX = opt("--enable-prefix-caching", True)


def test_a_hybrid_block_names_the_shortest_prompt_that_can_hit() -> None:
    block = _block(HYBRID)
    finding = only(run(config("0.32.0", PREFIX, model=HYBRID)), "SZ022")
    assert finding.severity.value == "info" and f"shorter than {block} tokens" in finding.message
    # TP 8 shrinks the state page per rank, so the block too.
    tp8 = opt("--tensor-parallel-size", "8")
    finding = only(run(config("0.32.0", PREFIX, tp8, model=HYBRID)), "SZ022")
    assert finding.evidence["block_size"] == _block(HYBRID, tp=8) < block
    # KV offload asks for reuse as well.
    offload = opt("--kv-offloading-size", "10")
    assert only(run(config("0.32.0", offload, model=HYBRID)), "SZ022")


def test_max_model_len_below_the_block_makes_caching_inert() -> None:
    block = _block(HYBRID)
    short = opt("--max-model-len", str(block - 32))
    finding = only(run(config("0.32.0", PREFIX, short, model=HYBRID)), "SZ022")
    assert finding.severity.value == "warning" and finding.flag == "--max-model-len"
    longer = opt("--max-model-len", str(block * 4))
    finding = only(run(config("0.32.0", PREFIX, longer, model=HYBRID)), "SZ022")
    assert finding.severity.value == "info"


def test_dense_models_and_no_reuse_are_quiet() -> None:
    assert "SZ022" not in codes(run(config("0.32.0", PREFIX, model=DENSE)))
    off = opt("--enable-prefix-caching", False, written="--no-enable-prefix-caching")
    assert "SZ022" not in codes(run(config("0.32.0", off, model=HYBRID)))
    # Nothing asked for: the model is not even looked up.
    assert "SZ022" not in codes(run(config("0.32.0", model=HYBRID)))


def test_an_lmcache_sidecar_in_the_pod_shows_the_chunk() -> None:
    # llm-d / KServe pods run `lmcache server` next to the engine; its --chunk-size is the
    # chunk the adapter checks.
    def with_sidecar(*words: str) -> ServeConfig:
        cfg = config("0.32.0", _mp_remote(), model=HYBRID)
        where = Location(file="pod.yaml", line=30)
        sidecar = PodContainer(
            name="lmcache", argv=tuple(SourceToken(text=w, location=where) for w in words)
        )
        invocation = msgspec.structs.replace(
            cfg.invocation, kind="kubernetes", pod_containers=(sidecar,)
        )
        return msgspec.structs.replace(cfg, invocation=invocation)

    block = _block(HYBRID)
    wrong = only(run(with_sidecar("lmcache", "server", "--chunk-size", "256")), "SZ021")
    assert wrong.severity.value == "error" and "container lmcache" in wrong.message
    assert wrong.location is not None and wrong.location.line == 30
    fits = with_sidecar("lmcache", "server", f"--chunk-size={2 * block}")
    assert "SZ021" not in codes(run(fits))
    # A sidecar that is not LMCache's says nothing about the chunk.
    other = with_sidecar("router", "--chunk-size", "256")
    # A `sh -c` script is split like a shell line.
    script = with_sidecar("/bin/sh", "-c", "exec lmcache server --chunk-size 256")
    assert only(run(script), "SZ021").severity.value == "error"
    assert only(run(other), "SZ021").severity.value == "warning"


def _mp_remote() -> ServeOption:
    extra = {"lmcache.mp.host": "tcp://localhost", "lmcache.mp.port": 5555}
    return ktc(
        kv_connector="LMCacheMPConnector", kv_role="kv_both", kv_connector_extra_config=extra
    )
