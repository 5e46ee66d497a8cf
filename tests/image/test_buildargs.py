"""The build-flag decision on history lines no registry fixture needs to carry."""

from __future__ import annotations

import pytest

from kvtool.image.buildargs import classify_build_flag
from kvtool.image.model import Connector, StepOutcome, Verdict
from kvtool.image.verdicts import decide
from kvtool.image.version import infer_vllm_version


def flag(*lines: str) -> tuple[str, str]:
    decided = classify_build_flag({"history": [{"created_by": line} for line in lines]})
    return decided.value, decided.decided_by


def test_assignment_inside_the_shell_body_is_not_a_build_arg() -> None:
    assert flag("RUN /bin/sh -c INSTALL_KV_CONNECTORS=true make install # buildkit") == (
        "unknown",
        "none",
    )


def test_body_test_of_the_variable_never_matches() -> None:
    line = 'RUN |1 TARGETPLATFORM=linux/amd64 /bin/bash -c if [ "$INSTALL_KV_CONNECTORS" = "true" ]'
    assert flag(line) == ("unknown", "none")


def test_the_last_run_prefix_wins_over_earlier_stages() -> None:
    assert flag(
        "RUN |1 INSTALL_KV_CONNECTORS=true /bin/sh -c echo base",
        "RUN |1 INSTALL_KV_CONNECTORS=false /bin/sh -c echo final",
    ) == ("false", "run-prefix")


def test_quoted_value_and_new_buildkit_arg_fallback() -> None:
    assert flag('RUN |1 INSTALL_KV_CONNECTORS="true" /bin/sh -c x') == ("true", "run-prefix")
    assert flag("ARG INSTALL_KV_CONNECTORS=true") == ("true", "arg-line")
    assert flag("/bin/sh -c #(nop) ARG INSTALL_KV_CONNECTORS") == ("unknown", "none")


def test_a_later_arg_line_does_not_speak_for_the_deciding_run_prefix() -> None:
    built = classify_build_flag(
        {
            "history": [
                {"created_by": "RUN |1 INSTALL_KV_CONNECTORS=0 /bin/sh -c make kv_connectors"},
                {"created_by": "ARG INSTALL_KV_CONNECTORS=true"},
            ]
        }
    )
    assert (built.value, built.decided_by, built.strong) == ("false", "run-prefix", True)
    assert built.deciding is not None and built.deciding.index == 0
    verdict = decide(
        Connector.nixl, built, StepOutcome(status="ran"), None, StepOutcome(status="skipped")
    )
    assert verdict.verdict is Verdict.not_bundled
    assert verdict.reason == "built with INSTALL_KV_CONNECTORS=0 (history #0, run-prefix)"


def test_malformed_history_is_unknown_not_an_error() -> None:
    assert classify_build_flag({"history": "nope"}).value == "unknown"
    assert classify_build_flag({"history": [None, 3, {"created_by": 5}]}).value == "unknown"


@pytest.mark.parametrize(
    ("labels", "env", "tag", "expected"),
    [
        ({}, {}, "v0.32.0-cu129", ("0.32.0", "tag")),
        ({}, {}, "0.11.0rc1", ("0.11.0rc1", "tag")),
        ({}, {}, "nightly-3f2a", (None, None)),
        ({}, {"VLLM_IMAGE_TAG": "v0.33.0"}, "latest", ("0.33.0", "env VLLM_IMAGE_TAG")),
        ({"ai.vllm.image.tag": "v0.31.1-cu130"}, {}, "x", ("0.31.1", "label ai.vllm.image.tag")),
    ],
)
def test_vllm_version_inference(
    labels: dict[str, str], env: dict[str, str], tag: str, expected: tuple[str | None, str | None]
) -> None:
    assert infer_vllm_version(labels, env, tag) == expected


def test_cuda_major_mismatch_of_connector_wheels() -> None:
    from kvtool.image.verdicts import cuda_mismatches

    wheels = {"nixl-cu12": "1.4.1", "cupy-cuda13x": "13.6.0", "lmcache": "0.5.6"}
    assert cuda_mismatches({"CUDA_VERSION": "13.0.1"}, wheels) == [
        "nixl-cu12 1.4.1 targets CUDA 12, the image has CUDA 13.0.1"
    ]
    assert cuda_mismatches({"CUDA_VERSION": "12.9.1"}, wheels) == [
        "cupy-cuda13x 13.6.0 targets CUDA 13, the image has CUDA 12.9.1"
    ]
    assert cuda_mismatches({}, wheels) == []
