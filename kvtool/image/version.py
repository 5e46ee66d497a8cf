"""Infer the vLLM version an image carries, without running it.

Order: OCI/vLLM labels (set by vLLM's docker-bake.hcl on newer builds), then
environment variables some builds set, then the tag itself (``v0.32.0-cu129``).
"""

from __future__ import annotations

import re

_VERSION_RE = re.compile(r"(?<![\d.])v?(\d+\.\d+\.\d+(?:(?:rc|\.post|\.dev)\d+)?)(?![\d])")
LABEL_KEYS = ("org.opencontainers.image.version", "ai.vllm.image.tag")
ENV_KEYS = ("VLLM_IMAGE_TAG", "VLLM_VERSION")


def version_in(text: str) -> str | None:
    match = _VERSION_RE.search(text)
    return match.group(1) if match else None


def infer_vllm_version(
    labels: dict[str, str], env: dict[str, str], tag: str | None
) -> tuple[str | None, str | None]:
    """``(version, where it was read)``; ``(None, None)`` when nothing names one."""
    for key in LABEL_KEYS:
        found = version_in(labels.get(key, ""))
        if found:
            return found, f"label {key}"
    for key in ENV_KEYS:
        found = version_in(env.get(key, ""))
        if found:
            return found, f"env {key}"
    if tag:
        found = version_in(tag)
        if found:
            return found, "tag"
    return None, None
