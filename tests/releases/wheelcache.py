"""The wheel cache the release-table tests read, and whether PyPI can fill it."""

from __future__ import annotations

import socket

from tests.conftest import REPO_ROOT

CACHE = REPO_ROOT / ".cache" / "wheels"


def pypi_reachable(timeout: float = 3.0) -> bool:
    """Whether pypi.org:443 accepts a connection within ``timeout`` seconds."""
    try:
        with socket.create_connection(("pypi.org", 443), timeout=timeout):
            return True
    except OSError:
        return False
