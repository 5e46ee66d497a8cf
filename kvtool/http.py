"""The one HTTP client of kvtool: live audit, verify's scrape and the registry client.

A server is input like any file, so every request is held to three bounds:

* **a real deadline** covering connect, TLS, the status line, every header byte and
  the whole body: the socket reads themselves get the time that is left (httpx's own
  timeouts restart on every byte, so a server that sends a header byte every two
  seconds would never trip them);
* **a body size**, counted after decoding: the content codings are decoded here, in
  bounded steps, never by httpx in one call (one gzip layer inflates a thousandfold,
  two a millionfold: 1.8 KB of ``Content-Encoding: gzip, gzip`` is 2 GB);
* **at most** :data:`MAX_ENCODINGS` **codings**, of the ones asked for (gzip, deflate).

Every failure is a :class:`HttpError` naming the request with secrets hidden
(:mod:`kvtool.redact`); callers put their own words (``--url``, ``--metrics-url``) in
front.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import httpcore
import httpx

from kvtool import limits, redact
from kvtool.errors import KvtoolError

# Two layers are what a proxy recompressing a compressed answer makes; more is an attack.
MAX_ENCODINGS = 2
ACCEPT_ENCODING = "gzip, deflate"
_DECODED_STEP = 64 * 1024  # most bytes one decompress call may produce
_LENGTH_DIGITS = 20  # a Content-Length with more digits is over every cap


class HttpError(KvtoolError):
    """A request failed: unreachable, refused, too slow, too big or malformed.

    ``url`` is the request's URL with its secrets hidden, ``reason`` what went wrong;
    the message is both.
    """

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(f"{url}: {reason}")
        self.url = url
        self.reason = reason


class HttpTimeout(HttpError):
    """The request's deadline passed before the whole answer arrived."""


class HttpUnreachable(HttpError):
    """No connection, or the connection failed mid-way."""


class HttpRefused(HttpError):
    """The answer is not acceptable: too big, truncated, or encoded past the limits."""


class Deadline:
    """An instant on the monotonic clock by which a request (or a series) must be done."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.at = time.monotonic() + seconds

    def left(self) -> float:
        return self.at - time.monotonic()

    def reason(self) -> str:
        """Why a request that ran past this deadline failed: the ``http_deadline_s``
        limit, or a caller's own shorter bound."""
        if self.seconds >= limits.HTTP_DEADLINE_S.value:
            return limits.HTTP_DEADLINE_S.reason()
        return f"no whole answer within {self.seconds:g} s"

    def bounded(self, timeout: float | None) -> float:
        """``timeout`` cut to the time left; a passed deadline raises httpcore's timeout
        (httpx maps it to its own, so the caller sees one kind of error)."""
        left = self.left()
        if left <= 0:
            raise httpcore.ReadTimeout(f"the {self.seconds:g} s deadline passed")
        return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore.NetworkStream):
    def __init__(self, inner: httpcore.NetworkStream, deadline: _DeadlineHolder) -> None:
        self._inner = inner
        self._deadline = deadline

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, self._deadline.bounded(timeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, self._deadline.bounded(timeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self,
        ssl_context: Any,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        inner = self._inner.start_tls(ssl_context, server_hostname, self._deadline.bounded(timeout))
        return _DeadlineStream(inner, self._deadline)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _DeadlineHolder:
    """The deadline of the request now in flight; the client sets it per request."""

    def __init__(self) -> None:
        self.current: Deadline | None = None

    def bounded(self, timeout: float | None) -> float | None:
        return timeout if self.current is None else self.current.bounded(timeout)


class _DeadlineBackend(httpcore.NetworkBackend):
    """httpcore's blocking sockets, every connect, read and write cut to the deadline."""

    def __init__(self, deadline: _DeadlineHolder) -> None:
        self._inner = httpcore.SyncBackend()
        self._deadline = deadline

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        stream = self._inner.connect_tcp(
            host, port, self._deadline.bounded(timeout), local_address, socket_options
        )
        return _DeadlineStream(stream, self._deadline)

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.NetworkStream:
        stream = self._inner.connect_unix_socket(
            path, self._deadline.bounded(timeout), socket_options
        )
        return _DeadlineStream(stream, self._deadline)

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


class _DeadlineTransport(httpx.HTTPTransport):
    """httpx's transport on a connection pool whose sockets keep the deadline.

    httpx builds its pool without a way to choose the network backend, so the pool is
    built again here, with httpcore's defaults and the deadline backend.
    """

    def __init__(self, deadline: _DeadlineHolder) -> None:
        super().__init__()
        self._pool = httpcore.ConnectionPool(
            ssl_context=httpx.create_ssl_context(),
            network_backend=_DeadlineBackend(deadline),
        )


class Client:
    """An httpx client whose every request keeps :class:`Deadline` and the body bounds.

    ``deadline``: one for the client's whole life (the registry: one inspection however
    many requests), else each request gets ``limits.HTTP_DEADLINE_S`` of its own.
    ``transport``: tests hand in an ``httpx.MockTransport``; the deadline is then checked
    between body chunks only (there is no socket to cut).
    """

    def __init__(
        self,
        *,
        headers: Mapping[str, str] | None = None,
        follow_redirects: bool = False,
        max_redirects: int = 5,
        deadline: Deadline | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._shared_deadline = deadline
        self._holder = _DeadlineHolder()
        all_headers = {"Accept-Encoding": ACCEPT_ENCODING, **(headers or {})}
        self._http = httpx.Client(
            transport=transport or _DeadlineTransport(self._holder),
            follow_redirects=follow_redirects,
            max_redirects=max_redirects,
            headers=all_headers,
            # The deadline bounds every socket operation of a direct connection. A proxy
            # from the environment (HTTPS_PROXY) gets httpx's own transport: there the
            # deadline holds between body chunks and each operation times out at it.
            timeout=self.deadline().seconds,
        )

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def deadline(self) -> Deadline:
        return self._shared_deadline or Deadline(limits.HTTP_DEADLINE_S.value)

    @contextmanager
    def stream(
        self,
        method: str,
        url: str | httpx.URL,
        *,
        headers: Mapping[str, str] | None = None,
        params: Any = None,
        deadline: Deadline | None = None,
    ) -> Iterator[Response]:
        """The answer to one request, its body not read yet (see :meth:`Response.body`)."""
        deadline = deadline or self.deadline()
        shown = redact.url(str(url))
        previous = self._holder.current
        self._holder.current = deadline
        try:
            request = self._http.build_request(method, url, headers=headers, params=params)
        except (httpx.InvalidURL, ValueError) as error:
            raise HttpRefused(shown, f"not a valid URL: {redact.message(str(error))}") from None
        try:
            with _mapped(shown, deadline):
                response = self._http.send(request, stream=True)
            try:
                yield Response(response, shown, deadline)
            finally:
                response.close()
        finally:
            self._holder.current = previous


class Response:
    """An answer whose body is read within the deadline and the caps."""

    def __init__(self, raw: httpx.Response, shown_url: str, deadline: Deadline) -> None:
        self.raw = raw
        self.url = shown_url
        self._deadline = deadline

    @property
    def status(self) -> int:
        return self.raw.status_code

    @property
    def headers(self) -> httpx.Headers:
        return self.raw.headers

    def body(self, cap: int | limits.Limit) -> bytes:
        """The body decoded, refusing more than ``cap`` bytes (before and after decoding),
        more codings than :data:`MAX_ENCODINGS`, one not asked for, and a body shorter
        than its Content-Length. ``cap`` as a limit is named when it is exceeded."""
        over = _over(cap)
        cap = cap.count if isinstance(cap, limits.Limit) else cap
        codings = _codings(self.raw.headers.get("content-encoding", ""), self.url)
        declared = _announced_length(self.raw.headers.get("content-length", ""))
        if declared is not None and declared > cap:
            shown = str(declared) if declared < 10**_LENGTH_DIGITS else "too many"
            raise HttpRefused(self.url, f"{shown} bytes announced: the body {over}")
        sent = _Counted(self._raw_chunks(), cap, over, self.url, self._deadline)
        decoded: Iterable[bytes] = sent
        if self.raw.is_stream_consumed:
            codings = []  # a test transport's answer: httpx already holds it decoded
        for coding in reversed(codings):  # the last coding listed was applied last
            decoded = _decode(coding, decoded, self.url)
        chunks: list[bytes] = []
        total = 0
        with _mapped(self.url, self._deadline):
            for chunk in decoded:
                total += len(chunk)
                if total > cap:
                    raise HttpRefused(self.url, f"body {over}")
                chunks.append(chunk)
        is_head = self.raw.request.method == "HEAD"
        if declared is not None and not is_head and sent.received != declared:
            raise HttpRefused(self.url, f"truncated, {sent.received} of {declared} announced bytes")
        return b"".join(chunks)

    def _raw_chunks(self) -> Iterator[bytes]:
        if self.raw.is_stream_consumed:
            yield self.raw.content
        else:
            yield from self.raw.iter_raw()


class _Counted:
    """The body as sent, counted, capped and held to the deadline between chunks."""

    def __init__(
        self, chunks: Iterator[bytes], cap: int, over: str, shown: str, deadline: Deadline
    ) -> None:
        self._chunks = chunks
        self._cap = cap
        self._over = over
        self._shown = shown
        self._deadline = deadline
        self.received = 0

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self._chunks:
            self.received += len(chunk)
            if self.received > self._cap:
                raise HttpRefused(self._shown, f"body {self._over}")
            if self._deadline.left() <= 0:
                raise HttpTimeout(self._shown, self._deadline.reason())
            yield chunk


def _over(cap: int | limits.Limit) -> str:
    """How a body over ``cap`` is described: the limit named, or the cap in bytes."""
    if isinstance(cap, limits.Limit):
        return f"is {cap.reason()}"
    return f"exceeds the {cap}-byte cap"


def _codings(header: str, shown: str) -> list[str]:
    codings = [c.strip().lower() for c in header.split(",") if c.strip()]
    codings = [c for c in codings if c != "identity"]
    if len(codings) > MAX_ENCODINGS:
        raise HttpRefused(
            shown, f"{len(codings)} content codings, more than the {MAX_ENCODINGS} accepted"
        )
    unknown = [c for c in codings if c not in ("gzip", "x-gzip", "deflate")]
    if unknown:
        raise HttpRefused(
            shown, f"content coding {unknown[0][:40]!r} was not asked for ({ACCEPT_ENCODING})"
        )
    return codings


def _decode(coding: str, chunks: Iterable[bytes], shown: str) -> Iterator[bytes]:
    """One content coding undone step by step, never more than ``_DECODED_STEP`` bytes
    from one call: the consumer's cap stops a bomb after one step past it."""
    wbits = 31 if coding in ("gzip", "x-gzip") else 15
    decoder = zlib.decompressobj(wbits)
    first = True
    try:
        for chunk in chunks:
            pending = chunk
            while pending:
                try:
                    out = decoder.decompress(pending, _DECODED_STEP)
                except zlib.error:
                    if not (first and coding == "deflate"):
                        raise
                    decoder = zlib.decompressobj(-15)  # raw deflate, as some servers send it
                    out = decoder.decompress(pending, _DECODED_STEP)
                first = False
                if out:
                    yield out
                if decoder.eof and decoder.unused_data and wbits == 31:
                    pending = decoder.unused_data  # another gzip member
                    decoder = zlib.decompressobj(wbits)
                else:
                    pending = decoder.unconsumed_tail
        rest = decoder.flush(_DECODED_STEP)
        if rest:
            yield rest
    except zlib.error as error:
        raise HttpRefused(shown, f"the {coding} body does not decode ({error})") from None


def _announced_length(declared: str) -> int | None:
    """Content-Length as a number; None unless plain ASCII digits (``str.isdigit`` takes
    "²", which ``int`` refuses). Thousands of digits are not converted: Python refuses
    them, and any over twenty is over every cap."""
    if not (declared.isascii() and declared.isdigit()):
        return None
    return int(declared) if len(declared) <= _LENGTH_DIGITS else 10**_LENGTH_DIGITS


@contextmanager
def _mapped(shown: str, deadline: Deadline) -> Iterator[None]:
    """httpx's failures as :class:`HttpError`, the URL's secrets hidden."""
    try:
        yield
    except httpx.TimeoutException:
        raise HttpTimeout(shown, deadline.reason()) from None
    except httpx.TooManyRedirects:
        raise HttpRefused(shown, "too many redirects (a loop?)") from None
    except (httpx.HTTPError, httpx.InvalidURL, httpx.StreamError) as error:
        if deadline.left() <= 0:
            raise HttpTimeout(shown, deadline.reason()) from None
        reason = redact.message(str(error)) or type(error).__name__
        raise HttpUnreachable(shown, f"{type(error).__name__}: {reason}") from None


# Where the headers of a request to a vLLM server come from when no --header is given.
HEADER_ENV = "KVTOOL_AUDIT_HEADER"  # "Name: value", e.g. "Authorization: Bearer $KEY"
API_KEY_ENV = "VLLM_API_KEY"  # vLLM's own --api-key env var: sent as a bearer token


def parse_header(text: str, where: str) -> tuple[str, str]:
    """``"Name: value"`` -> (name, value); anything else is a KvtoolError naming ``where``."""
    name, sep, value = text.partition(":")
    if not sep or not name.strip() or any(c.isspace() for c in name.strip()):
        # Not echoed: a header given wrong is most often a bare token or key.
        raise KvtoolError(
            f"{where}: not a 'Name: value' HTTP header ({len(text)} characters, not shown: "
            "it may hold a secret)"
        )
    return name.strip(), value.strip()


def request_headers(given: Sequence[str], environ: Mapping[str, str]) -> dict[str, str]:
    """``--header`` values, else ``$KVTOOL_AUDIT_HEADER``, else a bearer ``$VLLM_API_KEY``."""
    headers = dict(parse_header(h, "--header") for h in given)
    if not headers and environ.get(HEADER_ENV):
        headers = dict([parse_header(environ[HEADER_ENV], HEADER_ENV)])
    if not headers and environ.get(API_KEY_ENV):
        headers = {"Authorization": f"Bearer {environ[API_KEY_ENV]}"}
    return headers
