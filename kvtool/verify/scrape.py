"""Fetch ``/metrics`` from a running vLLM server (the only I/O of verification).

Through :mod:`kvtool.http`: the whole scrape (connect, headers and body) within
:data:`TIMEOUT_S` or ``http_deadline_s`` if lower, the decoded body within
``http_body_bytes`` (see :mod:`kvtool.limits`): a server that answers a byte a second
or a body that inflates without end never holds the run. A password in the URL is used,
never shown.
"""

from __future__ import annotations

from collections.abc import Mapping

from kvtool import limits, redact
from kvtool.errors import KvtoolError
from kvtool.verify.prometheus import Snapshot, parse

TIMEOUT_S = 10.0


def scrape(url: str, headers: Mapping[str, str] | None = None) -> Snapshot:
    """One scrape of ``url`` (with ``headers``, e.g. the server's API key); unreachable,
    non-200, too slow or too big is a KvtoolError."""
    from kvtool.http import HEADER_ENV, Client, Deadline, HttpError

    where = f"--metrics-url {redact.url(url)}"
    deadline = Deadline(min(TIMEOUT_S, limits.HTTP_DEADLINE_S.value))
    try:
        with (
            Client() as client,
            client.stream("GET", url, deadline=deadline, headers=headers) as response,
        ):
            if response.status in (401, 403):
                raise KvtoolError(
                    f"{where}: HTTP {response.status}; pass the server's API key with "
                    f"--header 'Authorization: Bearer KEY' or ${HEADER_ENV}"
                )
            if response.status != 200:
                raise KvtoolError(f"{where}: HTTP {response.status}")
            body = response.body(limits.HTTP_BODY_BYTES)
    except HttpError as error:
        raise KvtoolError(f"--metrics-url {error}") from None
    # The Prometheus text format is UTF-8; a stray byte must not end the diagnosis.
    return parse(body.decode("utf-8", errors="replace"), redact.url(url))
