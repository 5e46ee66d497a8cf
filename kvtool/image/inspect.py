"""Run the requested steps and assemble the report: the library behind the command."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from kvtool.errors import KvtoolError
from kvtool.image import cache
from kvtool.image.auth import Credentials, credentials_for
from kvtool.image.buildargs import classify_build_flag
from kvtool.image.errors import InspectError, RateLimitedError
from kvtool.image.manifest import MAX_CONFIG_BYTES, Platform, ResolvedConfig, resolve_config
from kvtool.image.model import (
    BuildFlag,
    Connector,
    ImageFacts,
    ImageSource,
    InspectionReport,
    ProbeReport,
    RateLimit,
    StepOutcome,
)
from kvtool.image.offline import read_offline
from kvtool.image.reference import parse_reference
from kvtool.image.registry import Progress, RegistryClient
from kvtool.image.runtime import ContainerLimits, probe_container, probe_local
from kvtool.image.verdicts import cuda_mismatches, decide, exit_code
from kvtool.image.version import infer_vllm_version

DEFAULT_PLATFORM = Platform("linux", "amd64")


def _quiet(_: str) -> None:
    pass


@dataclass
class ReadOptions:
    """How step 1 reads an image: registry access or offline input, and the platform."""

    platform: Platform = DEFAULT_PLATFORM
    credentials: Credentials | None = None
    insecure: bool = False
    use_cache: bool = True
    cache_dir: Path | None = None
    max_config_bytes: int = MAX_CONFIG_BYTES
    ref_name: str | None = None  # which image of a multi-image archive or layout
    transport: httpx.BaseTransport | None = None  # tests inject MockTransport here


@dataclass
class InspectRequest:
    image: str | None  # a registry reference or a path to an archive / OCI layout
    build_flag: bool = True
    runtime: bool = False  # run the import probe: with ``python`` when set, else in the engine
    python: Path | None = None
    connectors: list[Connector] = field(default_factory=lambda: list(Connector))
    read: ReadOptions = field(default_factory=ReadOptions)
    limits: ContainerLimits = field(default_factory=ContainerLimits)


_ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz")


def is_offline_input(target: str) -> bool:
    """Whether ``target`` names a local archive or layout; a path that does not exist is
    refused here rather than parsed as a (then confusingly invalid) image reference."""
    if Path(target).exists():
        return True
    if target.startswith(("/", "./", "../", "~")) or target.endswith(_ARCHIVE_SUFFIXES):
        raise KvtoolError(f"{target}: no such file or directory")
    return False


def read_image_facts(target: str, options: ReadOptions, progress: Progress = _quiet) -> ImageFacts:
    """Step 1: the config of ``target`` for the requested platform, and its build flag."""
    if is_offline_input(target):
        progress(f"reading {target}")
        offline = read_offline(
            Path(target), options.platform, options.ref_name, options.max_config_bytes
        )
        return _facts(
            target, offline.kind, offline.resolved, options.platform, offline.name, None, False
        )
    reference = parse_reference(target)
    credentials = options.credentials or credentials_for(reference.host)
    with RegistryClient(
        reference,
        credentials=credentials,
        insecure=options.insecure,
        transport=options.transport,
        progress=progress,
    ) as client:
        try:
            resolved, from_cache = _resolve_via_registry(client, options, str(reference))
        except RateLimitedError as exc:
            exc.rate_limit = exc.rate_limit or client.rate_limit
            raise
        return _facts(
            str(reference),
            "registry",
            resolved,
            options.platform,
            reference.tag,
            client.rate_limit,
            from_cache,
        )


def _resolve_via_registry(
    client: RegistryClient, options: ReadOptions, where: str
) -> tuple[ResolvedConfig, bool]:
    reference = client.image.reference
    if not options.use_cache:
        return resolve_config(
            client, reference, options.platform, where, options.max_config_bytes
        ), False
    digest = client.image.digest or client.head_digest(reference)
    if digest:
        hit = cache.load(digest, options.platform, options.cache_dir)
        if hit is not None:
            return hit, True
    resolved = resolve_config(
        client, digest or reference, options.platform, where, options.max_config_bytes
    )
    key = digest or resolved.index_digest or resolved.manifest_digest
    cache.store(key, options.platform, resolved, options.cache_dir)
    return resolved, False


def _facts(
    reference: str,
    source: ImageSource,
    resolved: ResolvedConfig,
    wanted: Platform,
    tag: str | None,
    rate_limit: RateLimit | None,
    from_cache: bool,
) -> ImageFacts:
    config = resolved.config
    raw_inner = config.get("config")
    inner: dict[str, Any] = raw_inner if isinstance(raw_inner, dict) else {}
    labels = _labels(inner.get("Labels"))
    env = _env(inner.get("Env"))
    actual = Platform.from_json(config)
    warnings = []
    if actual is not None and not wanted.matches(actual):
        if resolved.available_platforms:
            warnings.append(f"the config says {actual}, not the requested {wanted}")
        else:  # no index offered a choice: the one config is read whatever --platform says
            warnings.append(
                f"single-platform input: the config is for {actual}, not the requested {wanted}"
            )
    version, version_source = infer_vllm_version(labels, env, tag)
    return ImageFacts(
        reference=reference,
        source=source,
        platform=str(wanted),
        config_platform=str(actual) if actual else "unknown",
        available_platforms=resolved.available_platforms,
        index_digest=resolved.index_digest,
        manifest_digest=resolved.manifest_digest if source != "docker-archive" else None,
        config_digest=resolved.config_digest,
        labels=labels,
        env=env,
        vllm_version=version,
        vllm_version_source=version_source,
        build_flag=classify_build_flag(config),
        rate_limit=rate_limit,
        from_cache=from_cache,
        warnings=warnings,
    )


def _labels(raw: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in raw.items()} if isinstance(raw, dict) else {}


def _env(raw: Any) -> dict[str, str]:
    if not isinstance(raw, list):
        return {}
    pairs = (str(item).partition("=") for item in raw)
    return {key: value for key, _, value in pairs if key}


def inspect(request: InspectRequest, progress: Progress = _quiet) -> InspectionReport:
    """Run the requested steps; a step's failure is recorded, not raised.

    Bad usage (no image for a step that needs one) raises :class:`KvtoolError`.
    """
    image: ImageFacts | None = None
    build_step = StepOutcome(status="skipped", reason="not requested")
    if request.build_flag:
        if request.image is None:
            raise KvtoolError(
                "the build-flag check needs an IMAGE (a reference, archive or layout)"
            )
        try:
            image = read_image_facts(request.image, request.read, progress)
            build_step = StepOutcome(status="ran")
        except InspectError as exc:
            build_step = _failed(exc)
    probe, runtime_step = _runtime(request, _probe_target(request.image, image), progress)
    flag: BuildFlag | None = image.build_flag if image else None
    verdicts = [decide(c, flag, build_step, probe, runtime_step) for c in request.connectors]
    warnings = cuda_mismatches(image.env, probe.distributions) if image and probe else []
    return InspectionReport(
        image=image,
        build_flag_step=build_step,
        runtime_step=runtime_step,
        probe=probe,
        verdicts=verdicts,
        warnings=warnings,
        exit_code=exit_code(verdicts, [build_step, runtime_step]),
    )


def _probe_target(target: str | None, facts: ImageFacts | None) -> str | None:
    """The image the engine probes: pinned to the digest step 1 read from the registry, so
    both steps judge the same image (a stale local copy of the tag is not probed)."""
    if target is None or facts is None or facts.source != "registry":
        return target
    digest = facts.index_digest or facts.manifest_digest
    if digest is None:
        return target
    reference = parse_reference(target)
    return f"{reference.host}/{reference.repository}@{digest}"


def _runtime(
    request: InspectRequest, target: str | None, progress: Progress
) -> tuple[ProbeReport | None, StepOutcome]:
    if not request.runtime:
        return None, StepOutcome(status="skipped", reason="not requested")
    try:
        if request.python is not None:
            progress(f"running the import probe with {request.python}")
            return probe_local(request.python, request.limits.timeout_s), StepOutcome(status="ran")
        if target is None or is_offline_input(target):
            raise KvtoolError(
                "the container runtime check needs an image reference the engine can run, "
                "not a file; use --python PATH for a local environment"
            )
        report = probe_container(
            target, request.limits, progress, credentials=request.read.credentials
        )
        return report, StepOutcome(status="ran")
    except InspectError as exc:
        return None, _failed(exc)


def _failed(exc: InspectError) -> StepOutcome:
    """A step that could not run; a rate limit's remaining quota goes into the reason."""
    reason = str(exc)
    if isinstance(exc, RateLimitedError) and exc.rate_limit is not None:
        reason += f" [ratelimit-remaining {exc.rate_limit.remaining}]"
    return StepOutcome(status="failed", reason=reason, kind=exc.kind)
