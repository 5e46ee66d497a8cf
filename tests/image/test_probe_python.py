"""The runtime probe run in a local Python (``--python``) over fake packages."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.image.stubs import LIBCUDA, LIBCUDART, write_stubs


def probe(
    kvtool_cli: Any, monkeypatch: pytest.MonkeyPatch, stubs: Path
) -> tuple[int, dict[str, Any], str]:
    monkeypatch.setenv("PYTHONPATH", str(stubs))
    result = kvtool_cli("inspect-image", "--python", sys.executable, "--output-format", "json")
    return result.exit_code, json.loads(result.stdout), result.stderr


def by_connector(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["connector"]: v for v in report["verdicts"]}


def test_everything_imports_and_loads(
    tmp_path: Path, kvtool_cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, report, _ = probe(kvtool_cli, monkeypatch, write_stubs(tmp_path))
    assert code == 0
    verdicts = by_connector(report)
    assert {c: v["verdict"] for c, v in verdicts.items()} == dict.fromkeys(
        ("lmcache", "nixl", "mooncake"), "bundled"
    )
    assert "vLLM loads LMCacheConnectorV1, LMCacheMPConnector" in verdicts["lmcache"]["reason"]
    assert report["probe"]["imports"]["lmcache"]["version"] == "0.5.6"
    assert (
        report["probe"]["connectors"]["ExampleConnector"]["loaded"]
        == "vllm.example.ExampleConnector"
    )
    assert report["build_flag_step"]["status"] == "skipped"


def test_broken_missing_and_bundled_side_by_side(
    tmp_path: Path, kvtool_cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    stubs = write_stubs(
        tmp_path,
        packages=("lmcache", "nixl", "vllm"),
        failures={"nixl_ep.py": LIBCUDART},
        distributions={"nixl-cu12": "1.4.1"},
    )
    code, report, _ = probe(kvtool_cli, monkeypatch, stubs)
    assert code == 1
    verdicts = by_connector(report)
    assert verdicts["lmcache"]["verdict"] == "bundled"
    assert verdicts["nixl"]["verdict"] == "broken"
    assert verdicts["nixl"]["reason"] == "import nixl_ep fails"
    assert verdicts["nixl"]["error"] == f"ImportError: {LIBCUDART}"
    assert verdicts["mooncake"]["verdict"] == "not-bundled"
    assert verdicts["mooncake"]["error"] == "ModuleNotFoundError: No module named 'mooncake'"
    assert report["probe"]["distributions"]["nixl-cu12"] == "1.4.1"
    assert report["warnings"] == []  # no image config, so no CUDA_VERSION to compare with


def test_old_lmcache_without_parallel_strategy_is_broken(
    tmp_path: Path, kvtool_cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    stubs = write_stubs(
        tmp_path, adapter_symbols=("LMCacheMPSchedulerAdapter", "LMCacheMPWorkerAdapter")
    )
    _, report, _ = probe(kvtool_cli, monkeypatch, stubs)
    lmcache = by_connector(report)["lmcache"]
    assert lmcache["verdict"] == "broken"
    assert "cannot import name 'ParallelStrategy'" in lmcache["error"]


def test_missing_driver_is_unknown_not_broken(
    tmp_path: Path, kvtool_cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    stubs = write_stubs(tmp_path, failures={"mooncake/engine.py": LIBCUDA})
    code, report, _ = probe(kvtool_cli, monkeypatch, stubs)
    assert code == 1
    mooncake = by_connector(report)["mooncake"]
    assert mooncake["verdict"] == "unknown"
    assert "NVIDIA driver" in mooncake["reason"]


def test_connector_class_failing_to_load_through_the_factory_is_broken(
    tmp_path: Path, kvtool_cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    stubs = write_stubs(tmp_path)
    (stubs / "lmcache/integration/vllm/vllm_v1_adapter.py").write_text(
        "raise RuntimeError('torch ABI mismatch')\n"
    )
    _, report, _ = probe(kvtool_cli, monkeypatch, stubs)
    lmcache = by_connector(report)["lmcache"]
    assert lmcache["verdict"] == "broken"
    assert lmcache["reason"] == "vLLM cannot load LMCacheConnectorV1"
    assert lmcache["error"] == "RuntimeError: torch ABI mismatch"


def test_without_vllm_the_reason_says_the_connector_loads_went_unchecked(
    tmp_path: Path, kvtool_cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    stubs = write_stubs(tmp_path, packages=("lmcache", "nixl", "mooncake"))
    code, report, _ = probe(kvtool_cli, monkeypatch, stubs)
    assert code == 0  # the packages import; vLLM's absence is reported, not judged
    assert by_connector(report)["lmcache"]["reason"] == (
        "lmcache 0.5.6 and lmcache.c_ops import; vLLM connector loads not checked "
        "(ModuleNotFoundError: No module named 'vllm')"
    )


def test_missing_interpreter_is_a_usage_error(kvtool_cli: Any, tmp_path: Path) -> None:
    result = kvtool_cli("inspect-image", "--python", str(tmp_path / "nope"))
    assert result.exit_code == 2
    assert (
        result.stderr.strip() == f"kvtool: error: --python {tmp_path / 'nope'}: no such interpreter"
    )


def test_interpreter_that_prints_no_report_could_not_run(kvtool_cli: Any) -> None:
    result = kvtool_cli("inspect-image", "--python", "/bin/false", "--output-format", "json")
    assert result.exit_code == 2
    report = json.loads(result.stdout)
    assert report["runtime_step"]["kind"] == "probe"
    assert {v["verdict"] for v in report["verdicts"]} == {"unknown"}


def test_only_the_requested_connectors_decide_the_exit_code(
    tmp_path: Path, kvtool_cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(write_stubs(tmp_path, packages=("lmcache", "vllm"))))
    result = kvtool_cli("inspect-image", "--python", sys.executable, "--connector", "lmcache")
    assert result.exit_code == 0
    assert "mooncake" not in result.stderr


def test_unreachable_engine_is_could_not_run(
    kvtool_cli: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path / 'no-engine.sock'}")
    result = kvtool_cli(
        "inspect-image", "vllm/vllm-openai:v0.32.0", "--check", "runtime", "--output-format", "json"
    )
    assert result.exit_code == 2
    report = json.loads(result.stdout)
    assert report["runtime_step"]["kind"] == "engine"
    assert "no container engine answered" in report["runtime_step"]["reason"]
    assert {v["verdict"] for v in report["verdicts"]} == {"unknown"}


@pytest.mark.parametrize("memory", ["4 gigs", "0", "-1g", "4t"])
def test_bad_probe_memory_is_refused_before_the_engine_is_asked(
    kvtool_cli: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, memory: str
) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path / 'no-engine.sock'}")
    result = kvtool_cli(
        "inspect-image", "vllm/vllm-openai:v0.32.0", "--check", "runtime", "--probe-memory", memory
    )
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        f"kvtool: error: --probe-memory {memory!r}: expected a size such as 512m or 4g"
    )


# Docker Hub's pull-limit answer as dockerd passes it on (quoted in
# https://github.com/aquasecurity/tracee/issues/4248); the real engine's refusals of a
# private repository run in test_podman.py.
HUB_PULL_LIMIT = (
    "toomanyrequests: You have reached your pull rate limit. You may increase the limit by "
    "authenticating and upgrading: https://www.docker.com/increase-rate-limit"
)


@pytest.mark.parametrize(
    ("detail", "kind"),
    [
        (HUB_PULL_LIMIT, "rate-limited"),
        (
            "pull access denied for acme/vllm, repository does not exist or may require "
            "'docker login': denied: requested access to the resource is denied",
            "auth",
        ),
        ("manifest for acme/vllm:v9 not found: manifest unknown: manifest unknown", "engine"),
    ],
)
def test_pull_failures_are_classified_by_the_registry_error_code(detail: str, kind: str) -> None:
    from kvtool.image.runtime import pull_failure

    failure = pull_failure("acme/vllm:v9", detail)
    assert failure.kind == kind
    assert str(failure).endswith(detail)
