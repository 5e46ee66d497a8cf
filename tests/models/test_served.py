"""A release's model registry decides whether kvtool sizes a model for that release.

Fixtures are config.json shapes written here (only ``architectures`` and ``model_type``
matter): MiniMax-M1 as https://huggingface.co/MiniMaxAI/MiniMax-M1-80k/blob/main/config.json
names itself (MiniMaxM1ForCausalLM, minimax_m1) and Hunyuan-A13B as
https://huggingface.co/tencent/Hunyuan-A13B-Instruct/blob/main/config.json does
(HunYuanMoEV1ForCausalLM, hunyuan_v1_moe). Expected releases and classes are read from the
generated release tables, never typed here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvtool.errors import KvtoolError
from kvtool.models import find_model_config, refusal
from kvtool.releases import available_versions, load_release
from kvtool.sizing import load_model_spec
from tests.conftest import CliResult

MINIMAX_M1 = {"architectures": ["MiniMaxM1ForCausalLM"], "model_type": "minimax_m1"}
HUNYUAN_A13B = {"architectures": ["HunYuanMoEV1ForCausalLM"], "model_type": "hunyuan_v1_moe"}


def _tabled_with_registry() -> list[str]:
    """Releases whose table carries the model registry (generator 9 and later)."""
    return [v for v in available_versions() if load_release(v).model_registry is not None]


def _newest_refusing(arch: str) -> str:
    """The newest release whose registry lists ``arch`` as previously supported."""
    for version in reversed(_tabled_with_registry()):
        registry = load_release(version).model_registry
        if registry is not None and arch in registry.previously_supported:
            return version
    pytest.skip(f"no release table lists {arch} as previously supported")


def _config_dir(tmp_path: Path, config: dict[str, object]) -> Path:
    (tmp_path / "config.json").write_text(json.dumps(config))
    return tmp_path


def test_a_removed_architecture_is_refused_naming_release_and_last_support(
    tmp_path: Path,
) -> None:
    version = _newest_refusing("MiniMaxM1ForCausalLM")
    registry = load_release(version).model_registry
    assert registry is not None
    last = registry.previously_supported["MiniMaxM1ForCausalLM"]
    with pytest.raises(KvtoolError) as raised:
        load_model_spec(str(_config_dir(tmp_path, MINIMAX_M1)), release=version)
    message = str(raised.value)
    assert f"vLLM {version} no longer serves MiniMaxM1ForCausalLM" in message
    assert f"supported until v{last}" in message and "registry.py" in message


def test_transformers_backend_only_is_said_when_kvtool_knows_no_layout(tmp_path: Path) -> None:
    arch = HUNYUAN_A13B["architectures"][0]
    versions = [
        v
        for v in _tabled_with_registry()
        if arch in (load_release(v).model_registry or _no_registry()).transformers_backend
    ]
    if not versions:
        pytest.skip(f"no release table serves {arch} through the Transformers backend")
    version = versions[-1]
    found = find_model_config(str(_config_dir(tmp_path, HUNYUAN_A13B)))
    assert found is not None
    backend = load_release(version).model_registry.transformers_backend[arch]  # type: ignore[union-attr]
    reason = refusal(found, version, layout_known=False)
    assert reason is not None
    assert f"vLLM {version} serves {arch} only through its Transformers backend" in reason
    assert backend in reason
    # Olmo2-style: served by the Transformers backend but a layout row exists: sized.
    assert refusal(found, version, layout_known=True) is None


def test_natively_served_and_untabled_releases_are_not_refused(tmp_path: Path) -> None:
    versions = _tabled_with_registry()
    if not versions:
        pytest.skip("no release table carries the model registry")
    found = find_model_config("deepseek-v3.2")
    assert found is not None
    assert refusal(found, versions[-1], layout_known=True) is None
    # A table generated before the registry was read refuses nothing.
    older = [v for v in available_versions() if load_release(v).model_registry is None]
    if older:
        gone = find_model_config(str(_config_dir(tmp_path, MINIMAX_M1)))
        assert gone is not None
        assert refusal(gone, older[0], layout_known=False) is None


def _no_registry():  # type: ignore[no-untyped-def]
    from kvtool.releases.model import ModelRegistryFacts

    return ModelRegistryFacts(native=(), source="")


def test_size_cli_names_the_release_and_the_fact_in_one_line(
    kvtool_cli, tmp_path: Path  # type: ignore[no-untyped-def]
) -> None:
    version = _newest_refusing("MiniMaxM1ForCausalLM")
    model = _config_dir(tmp_path, MINIMAX_M1)
    result: CliResult = kvtool_cli("size", "--model", str(model), "--vllm-version", version)
    assert result.exit_code == 2 and result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1
    assert f"vLLM {version} no longer serves MiniMaxM1ForCausalLM" in result.stderr


def test_launch_refuses_the_model_the_release_no_longer_serves(tmp_path: Path) -> None:
    from kvtool.launch.recipe import find_recipe
    from kvtool.launch.sizes import launch_sizes

    version = _newest_refusing("MiniMaxM1ForCausalLM")
    with pytest.raises(KvtoolError, match=f"vLLM {version} no longer serves MiniMaxM1"):
        launch_sizes(
            find_recipe("native-cpu-offload"),
            model=str(_config_dir(tmp_path, MINIMAX_M1)),
            release=version,
            tp=1,
            host_ram_gib=64,
            cpu_tier_gib=None,
            utilization=None,
        )
