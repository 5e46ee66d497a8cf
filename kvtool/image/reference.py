"""Parse ``[host[:port]/]repository[:tag][@digest]`` the way Docker does.

Docker Hub is the only hard-coded registry: ``docker.io`` (and its aliases) maps to
the API host ``registry-1.docker.io`` and one-segment names get ``library/``.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from kvtool.errors import KvtoolError

DOCKER_HUB_ALIASES = frozenset({"docker.io", "index.docker.io", "registry-1.docker.io"})
DOCKER_HUB_API_HOST = "registry-1.docker.io"
# Hosts Docker itself talks plain HTTP to without being told (its built-in insecure list).

_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_REPOSITORY_RE = re.compile(rf"^{_COMPONENT}(?:/{_COMPONENT})*$")
_TAG_RE = re.compile(r"^[\w][\w.-]{0,127}$")
DIGEST_RE = re.compile(r"^sha256:[a-f0-9]{64}$|^sha512:[a-f0-9]{128}$")


@dataclass(frozen=True)
class ImageReference:
    """A parsed image reference. ``digest`` wins over ``tag`` when both are given."""

    host: str  # as written (docker.io for Hub), with port
    repository: str
    tag: str | None
    digest: str | None

    @property
    def api_host(self) -> str:
        return DOCKER_HUB_API_HOST if self.host in DOCKER_HUB_ALIASES else self.host

    @property
    def reference(self) -> str:
        """What goes after ``/manifests/``: the digest when pinned, else the tag."""
        return self.digest or self.tag or "latest"

    @property
    def is_loopback(self) -> bool:
        """localhost or any loopback address (all of 127.0.0.0/8, ::1): Docker talks
        plain HTTP to these without being told to."""
        hostname = self.host.rsplit(":", 1)[0] if not self.host.endswith("]") else self.host
        if hostname == "localhost":
            return True
        try:
            return ipaddress.ip_address(hostname.strip("[]")).is_loopback
        except ValueError:
            return False

    def __str__(self) -> str:
        text = f"{self.host}/{self.repository}"
        if self.tag:
            text += f":{self.tag}"
        if self.digest:
            text += f"@{self.digest}"
        return text


def parse_reference(text: str) -> ImageReference:
    """Parse ``text``; raise :class:`KvtoolError` naming the bad part."""
    original = text
    if not text or text != text.strip():
        raise KvtoolError(f"image reference {original!r} is empty or has surrounding spaces")
    digest = None
    if "@" in text:
        text, digest = text.split("@", 1)
        if not DIGEST_RE.match(digest):
            raise KvtoolError(
                f"image reference {original!r}: digest {digest!r} is not sha256:<64 hex>"
            )
    first, sep, rest = text.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost" or first.startswith("[")):
        host, remainder = first, rest
    else:
        host, remainder = "docker.io", text
    tag = None
    last_slash = remainder.rfind("/")
    colon = remainder.rfind(":")
    if colon > last_slash:
        remainder, tag = remainder[:colon], remainder[colon + 1 :]
        if not _TAG_RE.match(tag):
            raise KvtoolError(f"image reference {original!r}: tag {tag!r} is not a valid tag")
    if host in DOCKER_HUB_ALIASES and "/" not in remainder:
        remainder = f"library/{remainder}"
    if not _REPOSITORY_RE.match(remainder):
        raise KvtoolError(
            f"image reference {original!r}: repository {remainder!r} must be lowercase "
            "letters, digits and separators"
        )
    if tag is None and digest is None:
        tag = "latest"
    return ImageReference(host=host, repository=remainder, tag=tag, digest=digest)
