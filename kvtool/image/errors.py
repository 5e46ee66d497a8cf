"""Failures of an inspection step, classified so a verdict can say why it is unknown.

Every class is a :class:`KvtoolError`, so a failure that ends the command prints one
line and exits 2. ``kind`` is what an "unknown" verdict reports as its reason class:
a 429 or an auth failure must never read as "not bundled".
"""

from __future__ import annotations

from kvtool.errors import KvtoolError
from kvtool.image.model import RateLimit


class InspectError(KvtoolError):
    """An inspection step could not run; ``kind`` classifies why."""

    kind = "error"


class AuthError(InspectError):
    kind = "auth"


class RateLimitedError(InspectError):
    kind = "rate-limited"

    def __init__(self, message: str, rate_limit: RateLimit | None) -> None:
        super().__init__(message)
        self.rate_limit = rate_limit


class NetworkError(InspectError):
    kind = "network"


class NotFoundError(InspectError):
    kind = "not-found"


class RefusedError(InspectError):
    """Input that looks malicious or broken: oversize, loops, traversal, bad digests, bad JSON."""

    kind = "refused"


class EngineError(InspectError):
    """No container engine answered, or it failed to run the probe."""

    kind = "engine"


class ProbeError(InspectError):
    """The probe ran but produced no usable report (timeout, crash, no python)."""

    kind = "probe"
