"""Fetch ``/metrics`` from a running vLLM server (the only I/O of verification)."""

from __future__ import annotations

from kvtool.errors import KvtoolError
from kvtool.verify.prometheus import Snapshot, parse

TIMEOUT_S = 10.0


def scrape(url: str) -> Snapshot:
    """One scrape of ``url``; unreachable or non-200 is a KvtoolError naming the URL."""
    import httpx

    try:
        response = httpx.get(url, timeout=TIMEOUT_S)
    except httpx.HTTPError as exc:
        raise KvtoolError(f"--metrics-url {url}: {exc.__class__.__name__}: {exc}") from None
    if response.status_code != 200:
        raise KvtoolError(f"--metrics-url {url}: HTTP {response.status_code}")
    return parse(response.text, url)
