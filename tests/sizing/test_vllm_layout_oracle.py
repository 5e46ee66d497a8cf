"""The layout table and the release table agree with the suite's vLLM wheel itself.

The figures are compared end to end in ``test_vllm_end_to_end.py`` (vLLM's own engine
start on the meta device); these two check the data kvtool reads its rows from:
every ``rules/models/layouts.toml`` row cites a model file the wheel has, and the
generated release table's model registry is what vLLM's registry module holds.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.vllm_env import vllm_python, vllm_subprocess_env

pytestmark = pytest.mark.vllm

REGISTRY = (
    "import json, vllm; from vllm.model_executor.models import registry as r; "
    "print(json.dumps({'file': vllm.__file__, 'version': vllm.__version__, "
    "'all': {a: list(t) for a, t in r._VLLM_MODELS.items()}, "
    "'previous': dict(r._PREVIOUSLY_SUPPORTED_MODELS)}))"
)


@pytest.fixture(scope="module")
def wheel_registry(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    done = subprocess.run(
        [str(vllm_python()), "-c", REGISTRY],
        capture_output=True,
        text=True,
        timeout=300,
        env=vllm_subprocess_env(tmp_path_factory.mktemp("registry")),
        check=True,
    )
    found: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


def test_every_layout_row_cites_a_model_file_of_the_vllm_release(
    wheel_registry: dict[str, object],
) -> None:
    from kvtool.resources import read_table, rules_dir
    from kvtool.sizing.hf_config import LAYOUTS_FILE, layout_rows, unmodelled_rows

    version = str(wheel_registry["version"])
    # The citations (and the refusal's source link) are read at the suite's wheel release.
    assert read_table(rules_dir() / LAYOUTS_FILE)["vllm_release"] == version.split("+")[0]
    package = Path(str(wheel_registry["file"])).parent
    models_dir = package / "model_executor" / "models"
    for model_type, row in {**layout_rows(), **unmodelled_rows()}.items():
        cited = row["vllm"].split()[0].rstrip(":")
        # A bare file name is under model_executor/models; a path is under the package
        # (vLLM 0.32 serves Kimi-Linear from vllm/models/kimi_k3/).
        where = package if "/" in cited else models_dir
        assert (where / cited).is_file(), f"{model_type}: {cited} not in {where}"


def test_release_table_registry_is_vllms_own(wheel_registry: dict[str, object]) -> None:
    # The 0.32.0 table's model registry (read from the wheel's source by the generator)
    # equals what vLLM's own registry module holds when imported.
    from kvtool.releases import load_release

    registry = load_release("0.32.0").model_registry
    assert registry is not None
    served = wheel_registry["all"]
    assert isinstance(served, dict)
    transformers = {k: v[1] for k, v in served.items() if v[0] == "transformers"}
    assert registry.transformers_backend == transformers
    assert set(registry.native) == set(served) - set(transformers)
    assert registry.previously_supported == wheel_registry["previous"]
