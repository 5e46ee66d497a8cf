"""One model lookup (``kvtool.models.find_model_config``) serves size, launch and audit.

The same name or path gives the same config to ``kvtool size`` (``load_model_spec``),
``kvtool launch`` (``launch_sizes``) and the audit's identity (``identify``), so their
figures and traits cannot come from different files.
"""

from __future__ import annotations

import json
from pathlib import Path

from kvtool.launch.recipe import find_recipe
from kvtool.launch.sizes import launch_sizes
from kvtool.models import find_model_config, identify
from kvtool.models.catalog import find_entry
from kvtool.releases import available_versions
from kvtool.sizing import compute, load_model_spec, make_deployment
from kvtool.sizing.model_spec import spec_from_model_config


def _local_copy(tmp_path: Path, name: str) -> Path:
    entry = find_entry(name)
    assert entry is not None
    (tmp_path / "config.json").write_text(json.dumps(entry.config))
    return tmp_path


def test_size_reads_exactly_what_the_shared_lookup_finds(tmp_path: Path) -> None:
    for model in ("meta-llama/Llama-3.1-8B", str(_local_copy(tmp_path, "deepseek-v3.2"))):
        found = find_model_config(model)
        assert found is not None
        assert load_model_spec(model) == spec_from_model_config(found)


def test_a_local_copy_of_a_catalog_entry_gives_the_same_figures(tmp_path: Path) -> None:
    local = load_model_spec(str(_local_copy(tmp_path, "glm-5")))
    catalog = load_model_spec("zai-org/GLM-5")
    dep = make_deployment(tp=8, gpu_kv_gib=40, context_len=8192)
    ours, theirs = compute(local, dep), compute(catalog, dep)
    assert ours.model_dump(exclude={"model", "model_source"}) == theirs.model_dump(
        exclude={"model", "model_source"}
    )


def test_launch_sizes_the_model_size_sizes(tmp_path: Path) -> None:
    model = str(_local_copy(tmp_path, "llama-3.1-70b"))
    sizes = launch_sizes(
        find_recipe("native-cpu-offload"),
        model=model,
        release=available_versions()[-1],
        tp=8,
        host_ram_gib=1900,
        cpu_tier_gib=None,
        utilization=None,
    )
    report = compute(load_model_spec(model), make_deployment(tp=8, host_ram_gib=1900))
    assert sizes.values["sizing_model"] == report.model == model
    assert sizes.values["cpu_tier_tokens"] == report.cpu_tier_tokens


def test_audit_identity_classifies_the_file_size_reads(tmp_path: Path) -> None:
    model = str(_local_copy(tmp_path, "deepseek-v3.2"))
    found = find_model_config(model)
    identity = identify(model)
    assert found is not None and identity is not None
    assert identity.source == f"config.json at {found.where}"
    assert "mla" in identity.traits
    # The audit keeps asking the family table for names it has no file for.
    assert find_model_config("deepseek-ai/DeepSeek-V3.2", catalog=False) is None
    named = identify("deepseek-ai/DeepSeek-V3.2")
    assert named is not None and named.family == "DeepSeek-V3.2"
