"""What ``kvtool inspect-image`` finds, as pydantic models: the JSON output's schema.

Step 1 (build flag, from the image config) yields :class:`ImageFacts`; step 2 (the
runtime probe) yields :class:`ProbeReport`; :mod:`kvtool.image.verdicts` folds both
into one :class:`ConnectorVerdict` per connector inside an :class:`InspectionReport`.
"""

from __future__ import annotations

from enum import Enum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from kvtool.image.connectors import Connector as Connector  # re-exported: part of the schema

SCHEMA_VERSION = 1


class Verdict(str, Enum):
    bundled = "bundled"
    not_bundled = "not-bundled"
    broken = "broken"  # installed, but an import or connector load fails; error says why
    unknown = "unknown"  # inconclusive; reason says why (rate limit, auth, no engine, ...)


class HistoryEvidence(BaseModel):
    """One image-history line that mentions the build flag."""

    model_config = ConfigDict(frozen=True)

    index: int  # position in the config's history[]
    kind: Literal["run", "arg"]
    value: str | None  # the flag's value on this line; None for a valueless ARG (buildah)
    excerpt: str  # the first 200 characters of created_by


FlagValue = Literal["true", "false", "unknown"]


def deciding_line(evidence: list[HistoryEvidence]) -> HistoryEvidence | None:
    """The line the build flag is read from: the last RUN prefix, else the last ARG line
    with a value."""
    runs = [e for e in evidence if e.kind == "run"]
    if runs:
        return runs[-1]
    return next((e for e in reversed(evidence) if e.kind == "arg" and e.value), None)


class BuildFlag(BaseModel):
    """The ``INSTALL_KV_CONNECTORS`` decision read from the image history.

    ``value`` is "true" or "false" only when a RUN prefix (or, failing that, an ARG
    line with a value) said so; otherwise "unknown".
    """

    value: FlagValue
    decided_by: Literal["run-prefix", "arg-line", "none"]
    strong: bool = (
        False  # the deciding RUN body also mentions kv_connectors / install-kv-connectors
    )
    evidence: list[HistoryEvidence] = Field(default_factory=list)

    @property
    def deciding(self) -> HistoryEvidence | None:
        """The evidence line ``value`` came from; None when ``decided_by`` is "none"."""
        return deciding_line(self.evidence)


class RateLimit(BaseModel):
    """Docker Hub style ``ratelimit-*`` headers, as the registry sent them."""

    limit: str | None = None  # e.g. "100;w=21600"
    remaining: str | None = None
    source: str | None = None  # docker-ratelimit-source


ImageSource = Literal["registry", "docker-archive", "oci-layout", "oci-archive"]


class ImageFacts(BaseModel):
    """Step 1's result: the chosen platform's config, read without pulling layers."""

    reference: str
    source: ImageSource
    platform: str  # the platform the config was chosen for, "os/arch[/variant]"
    config_platform: str  # what the config itself says
    available_platforms: list[str] = Field(default_factory=list)
    index_digest: str | None = None  # the tag's digest when it names an index
    manifest_digest: str | None = None
    config_digest: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    env: dict[str, str] = Field(default_factory=dict)
    vllm_version: str | None = None
    vllm_version_source: str | None = None  # "label org.opencontainers.image.version", "tag", ...
    build_flag: BuildFlag
    rate_limit: RateLimit | None = None
    from_cache: bool = False
    warnings: list[str] = Field(default_factory=list)


class ImportResult(BaseModel):
    """One import (or symbol check) the probe attempted."""

    ok: bool
    version: str | None = None
    error: str | None = None  # "ExceptionType: message", as Python printed it
    error_type: str | None = None
    missing: str | None = None  # ModuleNotFoundError's module name, when that was the error
    loaded: str | None = None  # connector loads: "module.QualName"; submodules: their file


class ProbeReport(BaseModel):
    """What :mod:`kvtool.image.probe` printed, validated."""

    python: str
    imports: dict[str, ImportResult]  # "lmcache", "lmcache.c_ops", "nixl", "nixl_ep", ...
    mp_adapter: ImportResult | None = None  # vLLM's LMCache MP adapter symbols
    vllm: ImportResult | None = None
    connectors: dict[str, ImportResult] = Field(default_factory=dict)  # factory loads by name
    factory_error: str | None = None
    torch: str | None = None
    distributions: dict[str, str] = Field(default_factory=dict)  # connector/torch wheels


StepStatus = Literal["ran", "skipped", "failed"]


class StepOutcome(BaseModel):
    status: StepStatus
    reason: str | None = None  # why it was skipped or failed
    kind: str | None = None  # failure class: auth, rate-limited, network, engine, timeout, ...


class ConnectorVerdict(BaseModel):
    connector: Connector
    verdict: Verdict
    reason: str
    error: str | None = None  # the import or load error text for broken verdicts
    build_flag: FlagValue | None = None
    runtime: Literal["ok", "missing", "failed", "not-run"] = "not-run"


class InspectionReport(BaseModel):
    schema_version: int = SCHEMA_VERSION
    image: ImageFacts | None = None
    build_flag_step: StepOutcome
    runtime_step: StepOutcome
    probe: ProbeReport | None = None
    verdicts: list[ConnectorVerdict]
    warnings: list[str] = Field(default_factory=list)  # e.g. a wheel built for another CUDA
    exit_code: int  # 0 all bundled, 1 not bundled or inconclusive, 2 could not run
