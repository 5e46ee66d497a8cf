"""The wheel cache the release-table tests read, and whether PyPI can fill it."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

from kvtool.releases import load_release
from tests.conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "scripts"))
from releasegen import wheels

CACHE = REPO_ROOT / ".cache" / "wheels"


def pypi_reachable(timeout: float = 3.0) -> bool:
    """Whether pypi.org:443 accepts a connection within ``timeout`` seconds."""
    try:
        with socket.create_connection(("pypi.org", 443), timeout=timeout):
            return True
    except OSError:
        return False


def release_wheel(version: str) -> Path:
    """The wheel release ``version``'s table was generated from: from the cache, else
    downloaded into it; the calling test is skipped when neither is possible."""
    table = load_release(version)
    wheel = CACHE / table.wheel.filename
    if not wheel.is_file():
        if not pypi_reachable():
            pytest.skip(f"{wheel.name} is not in {CACHE} and pypi.org:443 is unreachable")
        wheel = wheels.download(wheels.default_pip(), CACHE, version)
        assert wheel.name == table.wheel.filename  # the same file the table came from
    return wheel
