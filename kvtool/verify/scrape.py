"""Fetch ``/metrics`` from a running vLLM server (the only I/O of verification).

The body is read in chunks within the ``http_body_bytes`` limit and the whole scrape
within ``http_deadline_s`` (see :mod:`kvtool.limits`): a server that answers a byte a
second never trips the per-read timeout, and a huge body never fills memory.
"""

from __future__ import annotations

import time

from kvtool import limits
from kvtool.errors import KvtoolError
from kvtool.verify.prometheus import Snapshot, parse

TIMEOUT_S = 10.0


def scrape(url: str) -> Snapshot:
    """One scrape of ``url``; unreachable, non-200, too slow or too big is a KvtoolError."""
    import httpx

    where = f"--metrics-url {url}"
    deadline = time.monotonic() + limits.HTTP_DEADLINE_S.value
    cap = limits.HTTP_BODY_BYTES.count
    try:
        with httpx.stream("GET", url, timeout=TIMEOUT_S) as response:
            if response.status_code != 200:
                raise KvtoolError(f"{where}: HTTP {response.status_code}")
            chunks: list[bytes] = []
            total = 0
            for chunk in response.iter_bytes():
                total += len(chunk)
                if total > cap:
                    raise limits.LimitExceeded(limits.HTTP_BODY_BYTES.message(where))
                if time.monotonic() > deadline:
                    raise limits.LimitExceeded(limits.HTTP_DEADLINE_S.message(where))
                chunks.append(chunk)
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        raise KvtoolError(f"{where}: {exc.__class__.__name__}: {exc}") from None
    # The Prometheus text format is UTF-8; a stray byte must not end the diagnosis.
    text = b"".join(chunks).decode("utf-8", errors="replace")
    return parse(text, url)
