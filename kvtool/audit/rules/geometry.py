"""SZ020-SZ022: hybrid geometry - the block vLLM really uses, against what the config assumes.

Attention + state hybrids (Mamba, Gated DeltaNet, linear attention) get one block size
for every KV cache group, raised until one attention page covers one state page (vLLM
0.32 ``Platform._align_hybrid_block_size``). The block comes from
:mod:`kvtool.audit.kv_layout` (the sizing package's arithmetic); these rules say what a
pinned ``--block-size``, LMCache's chunk size and short prompts meet there.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable

from kvtool.audit.context import RuleContext
from kvtool.audit.kv_layout import BLOCK_SIZE, KvLayout, kv_layout, pinned_block_size
from kvtool.audit.model import Finding, Fix, Location, Severity, SourceToken
from kvtool.audit.references import lmcache_issue, lmcache_source, vllm_issue, vllm_pr, vllm_source
from kvtool.audit.registry import ConfigRule, register
from kvtool.audit.rules._mp_server import (
    MP_CONNECTOR,
    SERVER_ARGS,
    autostarted,
    server_option,
)

CHUNK_SIZE_OPTION = "--chunk-size"
MAX_MODEL_LEN = "--max-model-len"
ENABLE_PREFIX_CACHING = "--enable-prefix-caching"

ALIGN_HYBRID_032 = vllm_source(
    "0.32.0", "vllm/platforms/interface.py",
    "Platform._align_hybrid_block_size at 0.32.0: the block is raised (even a pinned "
    "--block-size) until one attention page covers one state page",
)
MP_ADAPTER = lmcache_source(
    "lmcache/integration/vllm/vllm_multi_process_adapter.py",
    "LMCache's MP scheduler adapter asserts chunk_size % vllm_block_size == 0",
)
MP_SERVER_LAUNCHER = lmcache_source(
    "lmcache/integration/vllm/mp_server_launcher.py",
    "lmcache.mp.autostart.server_args: the auto-started server's options",
)


def _hybrid_layout(ctx: RuleContext) -> KvLayout | None:
    layout = kv_layout(ctx)
    return layout if layout is not None and layout.has_state else None


def _served(ctx: RuleContext, layout: KvLayout) -> str:
    """``Qwen/Qwen3-Next-80B-A3B at TP 1``: the model as the config names it."""
    return f"{ctx.config.model or layout.model} at TP {ctx.tp}"


def _arithmetic_note(ctx: RuleContext) -> str:
    return "" if ctx.version == "0.32.0" else " (vLLM 0.32's arithmetic)"


@register
class PinnedBlockSizeRaisedForHybrid(ConfigRule):
    """Reports a `--block-size` smaller than the block a hybrid model needs.

    What
    ----
    The served model has state layers (Mamba, Gated DeltaNet, linear attention) next to
    attention, `--block-size` is given, and it is smaller than the block at which one
    attention page covers one state page.

    Why
    ---
    vLLM does not refuse it: it raises the block (in steps of the pinned size) and logs
    "Setting attention block size to N tokens", so every KV cache group runs with N, not
    the pinned size. Whatever the pin was for - a disaggregated peer's block, an LMCache
    chunk, a retention interval - now sees N.

    Example
    -------
    `vllm serve Qwen/Qwen3-Coder-Next --block-size 256` (TP 1 runs with 768).

    Fix
    ---
    Drop `--block-size`, or pin the block vLLM reports; size what depended on it for that.

    Releases
    --------
    The block arithmetic is vLLM 0.32's (`kvtool size` checks it against vLLM's code).
    """

    code = "SZ020"
    name = "pinned-block-size-raised-for-hybrid"
    default_severity = Severity.warning
    summary = "--block-size is smaller than the hybrid block vLLM raises it to"
    fix_applicability = "display"
    references = (ALIGN_HYBRID_032,)
    since = "0.2.0"

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        pinned = pinned_block_size(ctx)
        layout = _hybrid_layout(ctx) if pinned is not None else None
        if pinned is None or layout is None or layout.block_size == pinned:
            return
        yield self.finding(
            f"`{BLOCK_SIZE} {pinned}` is too small for {_served(ctx, layout)}: vLLM "
            f"runs every KV cache group with blocks of {layout.block_size} tokens "
            f"({layout.reason}){_arithmetic_note(ctx)}.",
            flag=BLOCK_SIZE,
            location=ctx.location_of(BLOCK_SIZE),
            fix=Fix(
                applicability="display",
                description=f"drop {BLOCK_SIZE}, or pin {layout.block_size}",
            ),
            block_size=layout.block_size,
            pinned_block_size=pinned,
        )


def _chunk(value: str | None) -> int | None:
    return int(value) if value is not None and value.isdigit() and int(value) > 0 else None


def _split_words(argv: tuple[SourceToken, ...]) -> list[tuple[str, Location | None]]:
    """A container's words, a ``sh -c`` script split like a shell line (kept whole when it
    does not split), each with the location of the word it came from."""
    words: list[tuple[str, Location | None]] = []
    for token in argv:
        try:
            parts = shlex.split(token.text) if " " in token.text else [token.text]
        except ValueError:
            parts = [token.text]
        words.extend((part, token.location) for part in parts)
    return words


def _written_chunk(ctx: RuleContext) -> tuple[int, str, Location | None] | None:
    """The LMCache server's ``--chunk-size`` where the input shows it: the server the MP
    connector auto-starts (``server_args``, read only with ``lmcache.mp.autostart``), else
    an LMCache container next to the engine in its pod. (chunk, where in words, location)"""
    if autostarted(ctx):
        chunk = _chunk(server_option(ctx, CHUNK_SIZE_OPTION))
        if chunk is not None:
            source = f"`{SERVER_ARGS}` sets `{CHUNK_SIZE_OPTION} {chunk}`"
            return chunk, source, ctx.connector_location
    for container in ctx.config.invocation.pod_containers:
        words = _split_words(container.argv)
        if not any("lmcache" in text.lower() for text, _ in words):
            continue
        for index, (word, location) in enumerate(words):
            option, has_value, value = word.partition("=")
            if option != CHUNK_SIZE_OPTION:
                continue
            if not has_value and index + 1 < len(words):
                value = words[index + 1][0]
            chunk = _chunk(value)
            if chunk is not None:
                source = f"the pod's LMCache container {container.name} runs `{option} {chunk}`"
                return chunk, source, location or container.location
    return None


@register
class LmcacheChunkNotMultipleOfBlock(ConfigRule):
    """Reports an LMCache MP chunk size that is not a multiple of vLLM's block size.

    What
    ----
    `LMCacheMPConnector` with a block size (a hybrid model's raised block, or a pinned
    `--block-size`) that does not divide the LMCache server's chunk size: the server's
    `--chunk-size` when the connector auto-starts it with `lmcache.mp.autostart.server_args`
    or an LMCache container of the same pod runs with it, else the server default (256
    tokens).

    Why
    ---
    The MP adapter asserts `chunk_size % vllm_block_size == 0` when it connects, so the
    engine does not start (LMCache #4782: one pool's chunk cannot serve hybrids of
    different blocks; LMCache #4094: Qwen3.5's 544-token block). With the chunk written in
    the config it is an error; when the server runs elsewhere its chunk size is not in the
    config, and the default's failure is a warning.

    Example
    -------
    `vllm serve Qwen/Qwen3-Coder-Next --kv-offloading-backend lmcache` on 0.32.0 (block
    544, server chunk 256).

    Fix
    ---
    Start the LMCache server with a `--chunk-size` that is a multiple of the block vLLM
    reports (544 -> 1088, 1632, ...).

    Releases
    --------
    LMCache releases with the MP connector. Chunk default: `rules/models/sizing_facts.toml`.
    """

    code = "SZ021"
    name = "lmcache-chunk-not-multiple-of-block"
    default_severity = Severity.error
    summary = "LMCache MP chunk size is not a multiple of the vLLM block size: no start"
    fix_applicability = "display"
    references = (
        MP_ADAPTER,
        MP_SERVER_LAUNCHER,
        lmcache_issue(4782, "MP chunkSize must be a multiple of each hybrid model's block"),
        lmcache_issue(4094, "a hybrid's 544-token block pins LMCache's chunk to its multiples"),
    )
    since = "0.2.0"
    other_severities = (Severity.warning,)

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        if MP_CONNECTOR not in ctx.connector_names:
            return
        layout = kv_layout(ctx)
        pinned = pinned_block_size(ctx)
        if layout is not None:
            block, why = layout.block_size, f"{_served(ctx, layout)}: {layout.reason}"
        elif pinned is not None and not (ctx.model is not None and ctx.model.mamba):
            block, why = pinned, f"{BLOCK_SIZE} {pinned}"
        else:
            return
        written = _written_chunk(ctx)
        location = ctx.connector_location
        if written is not None:
            chunk, source, location = written[0], written[1], written[2] or location
        else:
            from kvtool.sizing.facts import sizing_facts

            chunk = sizing_facts().lmcache_chunk_size
            source = f"the LMCache server's default chunk is {chunk} tokens"
        if chunk % block == 0:
            return
        multiple = block * -(-chunk // block)
        outcome = (
            "the engine does not start"
            if written is not None
            else "unless the server was started with another chunk size, the engine does "
            "not start"
        )
        yield self.finding(
            f"vLLM runs blocks of {block} tokens ({why}){_arithmetic_note(ctx)} and {source}, "
            f"not a multiple: LMCache's MP adapter asserts chunk_size % block_size == 0, so "
            f"{outcome}. Use a chunk of {multiple} tokens (or another multiple of {block}).",
            flag=SERVER_ARGS,
            location=location,
            fix=Fix(
                applicability="display",
                description=f"start the LMCache server with {CHUNK_SIZE_OPTION} {multiple}",
            ),
            severity=Severity.error if written is not None else Severity.warning,
            block_size=block,
            chunk_size=chunk,
        )


@register
class HybridBlockHidesShortPrompts(ConfigRule):
    """Notes that a hybrid model's large block keeps short prompts from hitting any cache.

    What
    ----
    The served model's block is raised for its state layers (Qwen3-Next at TP 1: 544
    tokens instead of 16) and the config asks for KV reuse: a KV connector or KV offload,
    or `--enable-prefix-caching` written out.

    Why
    ---
    Prefix caching and KV offload reuse whole blocks only: a prompt shorter than one block
    never hits, and a longer one reuses a multiple of the block (vllm#40696: 0% hits under
    528 tokens on Qwen3.5). With `--max-model-len` below the block no request ever fills
    one, so caching does nothing at all (vllm#48401): a warning.

    Example
    -------
    `vllm serve Qwen/Qwen3-Coder-Next --enable-prefix-caching` (block 544 at TP 1), or the
    same with `--max-model-len 512`.

    Fix
    ---
    Expect hits only on shared prefixes longer than the block; higher TP shrinks the
    state page per rank and so the block (TP 8: 144). Raise `--max-model-len` above it.

    Releases
    --------
    The block arithmetic is vLLM 0.32's.
    """

    code = "SZ022"
    name = "hybrid-block-hides-short-prompts"
    default_severity = Severity.info
    summary = "hybrid block of hundreds of tokens: shorter prompts never hit the prefix cache"
    references = (
        ALIGN_HYBRID_032,
        vllm_issue(40696, "prefix caching gets 0% hits on prompts shorter than the hybrid block"),
        vllm_pr(48402, "prefix caching is inert when the block exceeds max_model_len"),
    )
    since = "0.2.0"
    other_severities = (Severity.warning,)

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        # Only where the config asks for KV reuse: the model lookup is not free, and a
        # config that names no reuse is not what this audit is about.
        asked = ctx.connector is not None or ctx.bool_option(ENABLE_PREFIX_CACHING) is True
        if not asked:
            return
        layout = _hybrid_layout(ctx)
        if layout is None or layout.block_size <= layout.backend_block_size:
            return
        max_len = ctx.int_option(MAX_MODEL_LEN, 0)
        inert = 0 < max_len < layout.block_size
        tail = (
            f"`{MAX_MODEL_LEN} {max_len}` is shorter than one block, so no request ever "
            "fills one and prefix caching and offload never hit."
            if inert
            else f"prompts shorter than {layout.block_size} tokens never hit the prefix "
            f"cache or an offload tier, and hits are whole multiples of {layout.block_size}."
        )
        yield self.finding(
            f"{_served(ctx, layout)} runs with blocks of {layout.block_size} tokens "
            f"instead of {layout.backend_block_size} ({layout.reason})"
            f"{_arithmetic_note(ctx)}: {tail}",
            flag=MAX_MODEL_LEN if inert else BLOCK_SIZE,
            location=ctx.location_of(MAX_MODEL_LEN if inert else BLOCK_SIZE),
            severity=Severity.warning if inert else Severity.info,
            block_size=layout.block_size,
        )
