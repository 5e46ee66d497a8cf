"""kvtool launch as a user runs it: sizes, release gates, targets and bad input."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from kvtool.releases import available_versions, load_release

MODEL = "meta-llama/Llama-3.1-8B-Instruct"  # an alias of llama-3.1-8b in the sizing catalog


def _json_plan(kvtool_cli: Any, *args: str) -> dict[str, Any]:
    result = kvtool_cli("launch", *args, "--model", MODEL, "--target", "json")
    assert result.exit_code == 0, result.stderr
    plan: dict[str, Any] = json.loads(result.stdout)
    return plan


def _engine_args(plan: dict[str, Any], name: str = "vllm") -> list[str]:
    (process,) = [p for p in plan["processes"] if p["name"] == name]
    return list(process["args"])


def _value(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


def test_native_offload_size_is_the_tp_wide_total_from_host_ram(kvtool_cli: Any) -> None:
    # sizing.md §4.2 F3: --kv-offloading-size is the TP-wide total; with the default
    # utilization 0.5 (sizing.md §1.2) 200 GiB of host RAM gives a 100 GiB tier.
    plan = _json_plan(kvtool_cli, "native-cpu-offload", "--tp", "4", "--host-ram-gib", "200",
                      "--vllm-version", "0.32.0")
    args = _engine_args(plan)
    assert _value(args, "--kv-offloading-size") == "100"
    assert _value(args, "--kv-offloading-backend") == "native"
    assert _value(args, "--tensor-parallel-size") == "4"


def test_fractional_sizes_carry_no_float_noise(kvtool_cli: Any) -> None:
    # 77.7 GiB x 0.333 = 25.8741 GiB exactly in decimal; the float product prints as
    # 25.874100000000002, which must not reach a flag. An exact size the operator gave
    # stays exact (0.0625 GiB = 64 MiB, the end-to-end test's tier).
    ram = ("--host-ram-gib", "77.7", "--utilization", "0.333")
    plan = _json_plan(kvtool_cli, "native-cpu-offload", *ram, "--vllm-version", "0.32.0")
    assert _value(_engine_args(plan), "--kv-offloading-size") == "25.8741"
    server = _engine_args(_json_plan(kvtool_cli, "lmcache-mp", *ram, "--vllm-version", "0.32.0"),
                          "lmcache-server")
    assert _value(server, "--l1-size-gb") == "25.8741"
    exact = _json_plan(kvtool_cli, "native-cpu-offload", "--cpu-tier-gib", "0.0625",
                       "--vllm-version", "0.32.0")
    assert _value(_engine_args(exact), "--kv-offloading-size") == "0.0625"
    assert exact["sizes"]["cpu_tier_bytes"] == 64 << 20


def test_sglang_per_gpu_size_becomes_the_total(kvtool_cli: Any) -> None:
    # sizing.md G-S3: SGLang 200 GB per GPU at TP8 is --kv-offloading-size 1600.
    plan = _json_plan(kvtool_cli, "native-cpu-offload", "--tp", "8", "--cpu-tier-gib", "1600",
                      "--vllm-version", "0.32.0")
    assert _value(_engine_args(plan), "--kv-offloading-size") == "1600"


def test_lmcache_server_memory_request_and_limit(kvtool_cli: Any) -> None:
    # sizing.md §2.8 / G-L4: L1 60 GiB -> request 65Gi, limit 98Gi, on the server container.
    result = kvtool_cli("launch", "lmcache-mp", "--model", MODEL, "--tp", "2",
                        "--cpu-tier-gib", "60", "--vllm-version", "0.32.0", "--target", "k8s")
    assert result.exit_code == 0, result.stderr
    deployment = next(yaml.safe_load_all(result.stdout))
    pod = deployment["spec"]["template"]["spec"]
    (server,) = pod["initContainers"]
    assert server["restartPolicy"] == "Always"
    assert server["resources"]["requests"]["memory"] == "65Gi"
    assert server["resources"]["limits"]["memory"] == "98Gi"
    assert _value(server["args"], "--l1-size-gb") == "60"
    assert _value(server["args"], "--http-host") == "0.0.0.0"  # probe-able (sizing.md §1.6)
    assert server["startupProbe"]["httpGet"]["path"] == "/healthcheck"
    (engine,) = pod["containers"]
    assert engine["resources"]["limits"]["nvidia.com/gpu"] == 2
    config = json.loads(_value(engine["args"], "--kv-transfer-config"))
    assert config["kv_connector"] == "LMCacheMPConnector"
    assert config["kv_connector_extra_config"]["lmcache.mp.port"] == 5555


def test_lmcache_l1_is_the_whole_budget_not_divided_by_tp(kvtool_cli: Any) -> None:
    # One MP server holds every rank's shard (sizing.md §0 item 2): no 1/TP share.
    plan = _json_plan(kvtool_cli, "lmcache-mp", "--tp", "8", "--host-ram-gib", "1900",
                      "--vllm-version", "0.32.0")
    assert _value(_engine_args(plan, "lmcache-server"), "--l1-size-gb") == "950"


def test_kaito_configmap_and_the_l1_kaito_will_compute(kvtool_cli: Any) -> None:
    # sizing.md G-K3: available 400 GiB, utilization 0.5, TP 2 -> KAITO's L1 is 100 GiB,
    # and the 1/TP share is warned about (§0 item 2).
    plan = _json_plan(kvtool_cli, "kaito-configmap", "--tp", "2", "--host-ram-gib", "400",
                      "--vllm-version", "0.32.0")
    assert plan["kaito"]["l1_gib"] == 100.0
    assert any("2x smaller" in w for w in plan["warnings"])
    result = kvtool_cli("launch", "kaito-configmap", "--model", MODEL, "--utilization", "0.25",
                        "--vllm-version", "0.32.0", "--target", "k8s")
    assert result.exit_code == 0, result.stderr
    configmap, workspace = yaml.safe_load_all(result.stdout)
    inner = yaml.safe_load(configmap["data"]["inference_config.yaml"])
    assert inner == {"vllm": {}, "kv_cache_cpu_memory_utilization": 0.25}
    assert workspace["inference"]["config"] == configmap["metadata"]["name"]


@pytest.mark.parametrize(
    ("version", "flag_expected"),
    # version-gates.md: OffloadingConnector subclasses SupportsHMA from 0.21.0; before,
    # HMA stayed on and vLLM refused to start without the flag (0.11.1-0.20.x on GPU).
    [("0.19.0", True), ("0.32.0", False)],
)
def test_hma_flag_only_where_the_connector_lacks_supports_hma(
    kvtool_cli: Any, version: str, flag_expected: bool
) -> None:
    plan = _json_plan(kvtool_cli, "native-cpu-offload", "--host-ram-gib", "64",
                      "--vllm-version", version, "--allow-below-security-floor")
    assert ("--disable-hybrid-kv-cache-manager" in _engine_args(plan)) is flag_expected


def test_nixl_side_channel_env_follows_the_release_table(kvtool_cli: Any) -> None:
    for version in ("0.11.0", "0.32.0"):
        plan = _json_plan(kvtool_cli, "nixl-disagg", "--tp", "2", "--vllm-version", version,
                          "--allow-below-security-floor")
        prefill, decode = plan["processes"]
        known = {e.name for e in load_release(version).env_vars}
        expected = "VLLM_NIXL_SIDE_CHANNEL_PORT" in known
        assert ("VLLM_NIXL_SIDE_CHANNEL_PORT" in dict(prefill["env"])) is expected
        # One host, two engines: distinct GPUs, ports and side channels.
        assert prefill["cuda_devices"] == "0,1" and decode["cuda_devices"] == "2,3"
        assert prefill["port"] != decode["port"]


def test_release_below_the_security_floor_needs_an_explicit_opt_in(kvtool_cli: Any) -> None:
    # rules/curated/security.toml: CVE-2026-48746 affects vLLM < 0.22.0.
    args = ("launch", "native-cpu-offload", "--model", MODEL, "--host-ram-gib", "64",
            "--vllm-version", "0.21.0")
    refused = kvtool_cli(*args)
    assert refused.exit_code == 2
    assert "CVE-2026-48746" in refused.stderr and "--allow-below-security-floor" in refused.stderr
    # The warning travels inside every file a user might keep, not only on stderr.
    for target in ("shell", "compose", "k8s"):
        allowed = kvtool_cli(*args, "--allow-below-security-floor", "--target", target)
        assert allowed.exit_code == 0
        warning = "# Warning: vLLM 0.21.0 is below the security floor: CVE-2026-48746"
        assert warning in allowed.stdout, target
    document = json.loads(kvtool_cli("launch", "--list", "--output-format", "json").stdout)
    assert document["schema_version"] == 1
    listed = document["recipes"]
    native = next(e for e in listed if e["name"] == "native-cpu-offload")
    assert native["supported_versions"][0] == "0.22.0"


@pytest.mark.parametrize(
    ("recipe", "version", "message"),
    [
        ("native-multi-tier-fs", "0.19.0", "TieringOffloadingSpec"),
        ("kvtool-connector-eviction-aware", "0.31.0", "0.32.0"),
        ("lmcache-mp-lazy-fifo", "0.19.0", "LMCacheMPConnector"),
        ("multiconnector-nixl-offload", "0.13.0", "cpu_bytes_to_use"),
        ("native-cpu-offload", "0.11.0", "--kv-offloading-size"),
    ],
)
def test_unsupported_release_is_refused_with_the_reason(
    kvtool_cli: Any, recipe: str, version: str, message: str
) -> None:
    result = kvtool_cli("launch", recipe, "--model", MODEL, "--host-ram-gib", "64",
                        "--vllm-version", version)
    assert result.exit_code == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["no-such-recipe", "--model", MODEL], "unknown recipe"),
        (["native-cpu-offload", "--model", MODEL], "--host-ram-gib"),
        (["native-cpu-offload", "--model", MODEL, "--host-ram-gib", "-5"], "--host-ram-gib"),
        (["native-cpu-offload", "--model", MODEL, "--host-ram-gib", "8", "--tp", "0"], "--tp"),
        (["native-cpu-offload", "--model", MODEL, "--host-ram-gib", "8", "--target", "helm"],
         "--target"),
        (["native-cpu-offload", "--model", MODEL, "--host-ram-gib", "8", "--env", "NOVALUE"],
         "--env"),
        (["native-cpu-offload", "--model", "no-such-model", "--host-ram-gib", "8"], "--model"),
        (["kaito-configmap", "--model", MODEL, "--target", "shell"], "k8s|json"),
        # KAITO's ConfigMap carries the utilization even when no RAM is given to size from.
        (["kaito-configmap", "--model", MODEL, "--target", "k8s", "--utilization", "5"],
         "--utilization"),
        (["kaito-configmap", "--model", MODEL, "--target", "k8s", "--host-ram-gib", "-1"],
         "--host-ram-gib"),
        (["native-cpu-offload", "--model", MODEL, "--host-ram-gib", "8", "--vllm-version",
          "banana"], "--vllm-version"),
        (["native-cpu-offload", "--host-ram-gib", "8"], "--model"),
    ],
)
def test_bad_input_exits_2_with_one_line(kvtool_cli: Any, args: list[str], message: str) -> None:
    result = kvtool_cli("launch", *args)
    assert result.exit_code == 2, result.stdout
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_output_dir_is_never_overwritten_without_force(kvtool_cli: Any, tmp_path: Path) -> None:
    args = ("launch", "native-cpu-offload", "--model", MODEL, "--host-ram-gib", "64",
            "--vllm-version", "0.32.0", "-d", str(tmp_path))
    assert kvtool_cli(*args).exit_code == 0
    script = tmp_path / "launch.sh"
    assert script.stat().st_mode & 0o111
    script.write_text("# mine\n")
    refused = kvtool_cli(*args)
    assert refused.exit_code == 2 and "--force" in refused.stderr
    assert script.read_text() == "# mine\n"
    assert kvtool_cli(*args, "--force").exit_code == 0
    assert "vllm serve" in script.read_text()


def test_extra_serve_args_and_env_reach_the_engine(kvtool_cli: Any) -> None:
    result = kvtool_cli("launch", "native-cpu-offload", "--model", MODEL, "--host-ram-gib", "64",
                        "--vllm-version", "0.32.0", "--env", "PYTHONHASHSEED=0", "--",
                        "--max-model-len", "8192")
    assert result.exit_code == 0, result.stderr
    assert "export PYTHONHASHSEED=0" in result.stdout
    words = shlex.split(result.stdout.split("exec ", 1)[1].replace("\\\n", " "))
    assert words[-2:] == ["--max-model-len", "8192"]


def test_list_describes_every_recipe_with_its_releases(kvtool_cli: Any) -> None:
    human = kvtool_cli("launch", "--list")
    assert human.exit_code == 0
    document = json.loads(kvtool_cli("launch", "--list", "--output-format", "json").stdout)
    assert document["schema_version"] == 1
    listed = document["recipes"]
    names = {entry["name"] for entry in listed}
    assert {
        "native-cpu-offload", "native-multi-tier-fs", "lmcache-mp",
        "lmcache-mp-lazy-fifo", "lmcache-mp-lazy-eviction-aware",
        "kvtool-connector-eager", "kvtool-connector-fifo", "kvtool-connector-eviction-aware",
        "nixl-disagg", "multiconnector-nixl-offload", "kaito-configmap",
    } <= names
    for entry in listed:
        assert entry["name"] in human.stdout
        assert entry["supported_versions"], entry["name"]
        assert entry["when"]
    tiered = next(e for e in listed if e["name"] == "native-multi-tier-fs")
    for version in tiered["supported_versions"]:
        facts = load_release(version)
        assert {"fs", "fs_python"} & set(facts.offload_tiers)
        assert "TieringOffloadingSpec" in facts.offload_specs


def test_reference_connector_gate_agrees_with_the_adapter() -> None:
    """The recipe's release gate must match the series kvtool.connector.vllm accepts."""
    from kvtool.connector.series import SUPPORTED_SERIES
    from kvtool.launch.recipe import load_recipes

    adapter = Path(__file__).resolve().parents[2] / "kvtool" / "connector" / "vllm"
    series = SUPPORTED_SERIES
    recipe = next(r for r in load_recipes() if r.name == "kvtool-connector-eager")
    (gate,) = recipe.gates
    first, last = min(series), max(series)
    assert gate.since == f"{first[0]}.{first[1]}.0"
    assert gate.before == f"{last[0]}.{last[1] + 1}.0"
    (engine,) = recipe.processes
    assert engine.kv_transfer_config is not None
    assert engine.kv_transfer_config["kv_connector_module_path"] == "kvtool.connector.vllm"
    assert f"class {engine.kv_transfer_config['kv_connector']}(" in (
        adapter / "connector.py").read_text()


def test_without_a_version_the_reference_connector_plans_for_a_release_it_supports(
    kvtool_cli: Any,
) -> None:
    """The adapter is written for a few vLLM series; the newest table may be past them."""
    from kvtool.launch.recipe import find_recipe
    from kvtool.launch.service import supported_versions

    supported = supported_versions(find_recipe("kvtool-connector-eager"))
    result = kvtool_cli("launch", "kvtool-connector-eager", "--model", MODEL,
                        "--host-ram-gib", "64", "--target", "json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["vllm_version"] == supported[-1]
    if supported[-1] != available_versions()[-1]:
        assert f"planning for {supported[-1]}" in result.stderr


def test_a_release_outside_the_adapter_is_refused_without_a_security_hint(
    kvtool_cli: Any,
) -> None:
    from packaging.version import Version

    from kvtool.launch.recipe import find_recipe
    from kvtool.launch.service import supported_versions

    supported = supported_versions(find_recipe("kvtool-connector-eager"))
    later = [v for v in available_versions() if Version(v) > Version(supported[-1])]
    earlier = [v for v in available_versions() if Version(v) < Version(supported[0])]
    # The first release past the adapter when a table has one (a release just out),
    # else the newest one before it.
    outside = later[0] if later else earlier[-1]
    refused = kvtool_cli("launch", "kvtool-connector-eager", "--model", MODEL,
                         "--host-ram-gib", "64", "--vllm-version", outside)
    assert refused.exit_code == 2
    assert f"does not support vLLM {outside}" in refused.stderr
    assert "kvtool.connector.vllm" in refused.stderr  # the gate says which part refuses
    assert "--allow-below-security-floor" not in refused.stderr  # it would not help


@pytest.mark.parametrize(
    ("version", "tier_type"),
    # version-gates.md §4 row 7: the filesystem tier is "fs_python" on 0.22.x, "fs" from 0.23.0.
    [("0.22.1", "fs_python"), ("0.23.0", "fs"), ("0.32.0", "fs")],
)
def test_filesystem_tier_type_follows_the_release(
    kvtool_cli: Any, version: str, tier_type: str
) -> None:
    plan = _json_plan(kvtool_cli, "native-multi-tier-fs", "--host-ram-gib", "64",
                      "--vllm-version", version, "--fs-path", "/nvme/kv")
    config = json.loads(_value(_engine_args(plan), "--kv-transfer-config"))
    extra = config["kv_connector_extra_config"]
    assert extra["spec_name"] == "TieringOffloadingSpec"
    assert extra["secondary_tiers"] == [{"type": tier_type, "root_dir": "/nvme/kv"}]
    assert extra["cpu_bytes_to_use"] == 32 << 30  # 64 GiB x utilization 0.5, in bytes
