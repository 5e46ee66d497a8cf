"""How the generator reads a ``choices=`` that is built rather than written out.

Releases before 0.10 build several choice lists from module-level names: a starred
registry dict (``choices=[*QUANTIZATION_METHODS, None]``), a comprehension over an
enum (``[f.value for f in LoadFormat]``), ``get_args`` of a ``Literal`` alias. Shapes of
https://github.com/vllm-project/vllm/blob/v0.6.0/vllm/engine/arg_utils.py,
https://github.com/vllm-project/vllm/blob/v0.6.0/vllm/model_executor/layers/quantization/__init__.py
and https://github.com/vllm-project/vllm/blob/v0.8.5/vllm/model_executor/layers/quantization/__init__.py.
A list that cannot be read whole must come out as "no choices" (nothing refused), never
as a partial list that would refuse values the release accepts.
"""

from __future__ import annotations

import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

from releasegen.build import build_release

from kvtool.releases.model import ReleaseFacts

SOURCES = {
    "vllm/__init__.py": "",
    "vllm/entrypoints/openai/cli_args.py": """
        import argparse
        from vllm.engine.arg_utils import AsyncEngineArgs

        def make_arg_parser():
            parser = argparse.ArgumentParser(description="server")
            parser.add_argument("--port", type=int, default=8000)
            return AsyncEngineArgs.add_cli_args(parser)
    """,
    "vllm/config.py": """
        import enum

        class LoadFormat(str, enum.Enum):
            \"\"\"Weights formats.\"\"\"
            AUTO = "auto"
            PT = "pt"
            SAFETENSORS = "safetensors"

        class VisionConfig:
            class InputType(enum.Enum):
                PIXEL_VALUES = enum.auto()
                IMAGE_FEATURES = enum.auto()

        class NotAnEnum:
            A = "a"
    """,
    "vllm/quant/__init__.py": """
        from typing import Literal, get_args
        from vllm.quant.awq import AWQConfig
        from vllm.quant.fp8 import Fp8Config

        METHODS = {"awq": AWQConfig, "fp8": Fp8Config}
        Methods = Literal["awq", "gptq"]
        Extended = Literal[Methods, "marlin"]
        METHOD_LIST: list[str] = list(get_args(Extended))
    """,
    "vllm/quant/awq.py": "class AWQConfig: ...\n",
    "vllm/quant/fp8.py": "class Fp8Config: ...\n",
    "vllm/engine/arg_utils.py": """
        import argparse
        from dataclasses import dataclass
        from typing import Optional, get_args
        from vllm.config import LoadFormat, VisionConfig, NotAnEnum
        from vllm.quant import METHODS, METHOD_LIST, Extended
        from vllm.plugins import discovered_backends

        @dataclass
        class EngineArgs:
            quantization: Optional[str] = None

            @staticmethod
            def add_cli_args(parser):
                parser.add_argument('--quantization', '-q',
                                    choices=[*METHODS, None], default=None)
                parser.add_argument('--spec-quantization',
                                    choices=[*METHOD_LIST, None], default=None)
                parser.add_argument('--method', choices=get_args(Extended))
                parser.add_argument('--load-format', default='auto',
                                    choices=[f.value for f in LoadFormat])
                parser.add_argument('--input-type',
                                    choices=[t.name.lower() for t in VisionConfig.InputType])
                parser.add_argument('--input-value',
                                    choices=[t.value for t in VisionConfig.InputType])
                parser.add_argument('--backend',
                                    choices=[*discovered_backends(), 'auto'])
                parser.add_argument('--other', choices=[*UNDEFINED_NAME, 'x'])
                parser.add_argument('--not-enum', choices=[c for c in NotAnEnum])
                parser.add_argument('--registry', choices=list(REGISTRY))
                return parser

        REGISTRY = {}

        @dataclass
        class AsyncEngineArgs(EngineArgs):
            @staticmethod
            def add_cli_args(parser):
                return EngineArgs.add_cli_args(parser)
    """,
}


@pytest.fixture(scope="module")
def facts(tmp_path_factory: pytest.TempPathFactory) -> ReleaseFacts:
    wheel = tmp_path_factory.mktemp("wheel") / "vllm-0.6.0-cp38-abi3-manylinux1_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for member, text in SOURCES.items():
            zf.writestr(member, textwrap.dedent(text))
    return build_release("0.6.0", wheel, "0" * 64)


def _choices(facts: ReleaseFacts, flag: str) -> tuple[str, ...] | None:
    return next(f.choices for f in facts.flags if f.name == flag)


def test_a_starred_registry_dict_gives_its_keys(facts: ReleaseFacts) -> None:
    assert _choices(facts, "--quantization") == ("awq", "fp8", "None")


def test_a_starred_list_built_from_get_args_of_a_nested_literal(facts: ReleaseFacts) -> None:
    assert _choices(facts, "--spec-quantization") == ("awq", "gptq", "marlin", "None")
    assert _choices(facts, "--method") == ("awq", "gptq", "marlin")


def test_a_comprehension_over_an_enum_gives_its_values_or_names(facts: ReleaseFacts) -> None:
    assert _choices(facts, "--load-format") == ("auto", "pt", "safetensors")
    assert _choices(facts, "--input-type") == ("pixel_values", "image_features")


@pytest.mark.parametrize(
    "flag",
    [
        "--input-value",  # enum.auto() values are not static
        "--backend",  # a call whose result is only known at run time
        "--other",  # a starred name nothing defines
        "--not-enum",  # iterating a plain class is not a sequence of values
        "--registry",  # an empty dict filled by decorators at import time
    ],
)
def test_a_list_not_read_whole_gives_no_choices(facts: ReleaseFacts, flag: str) -> None:
    assert _choices(facts, flag) is None
