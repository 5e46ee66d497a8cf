"""A read-only registry client (distribution spec v2 / OCI distribution) on httpx.

It answers the auth challenge it is given (anonymous or credentialed Bearer tokens,
Basic), sends all four manifest media types, follows redirects to blob storage
(httpx drops ``Authorization`` across origins, as presigned URLs require), caps and
verifies every body, and remembers the registry's rate-limit headers.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import TracebackType

import httpx

from kvtool import limits
from kvtool.image.auth import Challenge, Credentials, parse_challenge
from kvtool.image.errors import (
    AuthError,
    InspectError,
    NetworkError,
    NotFoundError,
    RateLimitedError,
    RefusedError,
)
from kvtool.image.manifest import (
    ACCEPT,
    MAX_MANIFEST_BYTES,
    Document,
    load_json_object,
    sha256_digest,
    verify_digest,
)
from kvtool.image.model import RateLimit
from kvtool.image.reference import DIGEST_RE, ImageReference

MAX_REDIRECTS = 5  # Hub needs one (to its CDN); a chain longer than a few is a loop
MAX_TOKEN_BYTES = 1024 * 1024
DEFAULT_TIMEOUT_S = 30.0

Progress = Callable[[str], None]


def _no_progress(_: str) -> None:
    pass


class RegistryClient:
    """Reads manifests and blobs of one repository; use as a context manager.

    Invariant: a token is fetched only in answer to a 401 challenge and reused for
    every later request to the same repository.
    """

    def __init__(
        self,
        image: ImageReference,
        *,
        credentials: Credentials | None = None,
        insecure: bool = False,
        transport: httpx.BaseTransport | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        progress: Progress = _no_progress,
    ) -> None:
        scheme = "http" if image.is_loopback or insecure else "https"
        self.image = image
        self._base = f"{scheme}://{image.api_host}/v2/{image.repository}"
        self._credentials = credentials
        self._authorization: str | None = None
        self._progress = progress
        self.rate_limit: RateLimit | None = None
        # One deadline for the whole inspection, however many requests it takes.
        self._deadline = time.monotonic() + limits.HTTP_DEADLINE_S.value
        self._http = httpx.Client(
            transport=transport,
            timeout=timeout_s,
            follow_redirects=True,
            max_redirects=MAX_REDIRECTS,
            headers={"User-Agent": "kvtool-inspect-image"},
        )

    def __enter__(self) -> RegistryClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._http.close()

    # -- ManifestSource -------------------------------------------------------------

    def head_digest(self, reference: str) -> str | None:
        """The tag's digest from a HEAD (which Docker Hub does not count as a pull)."""
        try:
            with self._request(
                "HEAD", f"/manifests/{reference}", what=f"manifest {reference}"
            ) as r:
                digest = r.headers.get("docker-content-digest")
        except NotFoundError:
            return None  # a HEAD has no error body; the GET that follows reports the details
        return digest if digest and DIGEST_RE.match(digest) else None

    def fetch_manifest(self, reference: str) -> Document:
        what = f"manifest {self.image.repository}:{reference}"
        self._progress(f"fetching {what}")
        with self._request("GET", f"/manifests/{reference}", what=what) as response:
            body = _read_capped(response, MAX_MANIFEST_BYTES, what, self._deadline)
            media_type = response.headers.get("content-type", "").split(";")[0].strip()
            header_digest = response.headers.get("docker-content-digest")
        if DIGEST_RE.match(reference):
            verify_digest(reference, body, what)
            digest = reference
        else:
            digest = sha256_digest(body)
            if header_digest and header_digest.startswith("sha256:") and header_digest != digest:
                raise RefusedError(
                    f"{what}: body digest {digest} differs from "
                    f"Docker-Content-Digest {header_digest}"
                )
        return Document(media_type, digest, body)

    def fetch_blob(self, digest: str, max_bytes: int) -> bytes:
        what = f"blob {digest}"
        self._progress(f"fetching config {digest[:19]}")
        with self._request("GET", f"/blobs/{digest}", what=what) as response:
            body = _read_capped(response, max_bytes, what, self._deadline)
        verify_digest(digest, body, what)
        return body

    # -- transport and auth -----------------------------------------------------------

    @contextmanager
    def _request(self, method: str, path: str, *, what: str) -> Iterator[httpx.Response]:
        response = self._send(method, self._base + path)
        if response.status_code == 401:
            challenge = response.headers.get("www-authenticate")
            response.close()
            if not challenge:
                raise AuthError(f"{what}: 401 from {self.image.api_host} without a challenge")
            self._answer(parse_challenge(challenge), what)
            response = self._send(method, self._base + path)
        try:
            self._check(response, what)
            yield response
        finally:
            response.close()

    def _send(self, method: str, url: str) -> httpx.Response:
        headers = {"Accept": ACCEPT}
        if self._authorization:
            headers["Authorization"] = self._authorization
        _check_deadline(self._deadline, url)
        try:
            request = self._http.build_request(method, url, headers=headers)
        except (httpx.InvalidURL, ValueError) as exc:
            raise RefusedError(f"{url}: not a valid URL: {exc}") from None
        try:
            return self._http.send(request, stream=True)
        except httpx.TooManyRedirects:
            raise RefusedError(f"{url}: more than {MAX_REDIRECTS} redirects (loop?)") from None
        except httpx.HTTPError as exc:
            raise NetworkError(f"{url}: {type(exc).__name__}: {exc}") from None

    def _check(self, response: httpx.Response, what: str) -> None:
        announced = _rate_limit(response.headers)
        if announced is not None:
            self.rate_limit = announced
        status = response.status_code
        if status < 400:
            return
        detail = _error_detail(response)
        if status == 429:
            raise RateLimitedError(
                f"{what}: rate-limited by {self.image.api_host} (429{detail})", self.rate_limit
            )
        if status == 401:
            challenge = parse_challenge(response.headers.get("www-authenticate", ""))
            scope_error = challenge.params.get("error")
            raise AuthError(
                f"{what}: {self.image.api_host} refused the credentials (401"
                + (f" {scope_error}" if scope_error else "")
                + f"{detail}); check --username/--password-stdin or the Docker config file"
            )
        if status == 403:
            raise AuthError(f"{what}: access denied by {self.image.api_host} (403{detail})")
        if status == 404:
            raise NotFoundError(
                f"{what}: not found on {self.image.api_host} (404{detail}); a wrong tag, or a "
                "registry that does not serve this manifest type"
            )
        raise InspectError(f"{what}: {self.image.api_host} answered {status}{detail}")

    def _answer(self, challenge: Challenge, what: str) -> None:
        if challenge.scheme == "basic":
            if self._credentials is None:
                raise AuthError(f"{what}: {self.image.api_host} requires credentials (Basic)")
            self._authorization = _basic(self._credentials)
            return
        if challenge.scheme != "bearer" or "realm" not in challenge.params:
            raise AuthError(f"{what}: unsupported auth challenge {challenge.scheme!r}")
        self._authorization = "Bearer " + self._fetch_token(challenge, what)

    def _fetch_token(self, challenge: Challenge, what: str) -> str:
        realm = challenge.params["realm"]
        params: list[tuple[str, str | int | float | bool | None]] = []
        if "service" in challenge.params:
            params.append(("service", challenge.params["service"]))
        params.append(
            ("scope", challenge.params.get("scope") or f"repository:{self.image.repository}:pull")
        )
        try:
            realm_url = httpx.URL(realm)
        except (httpx.InvalidURL, ValueError) as exc:
            raise AuthError(f"{what}: token realm {realm!r} is not a valid URL: {exc}") from None
        headers = {}
        if self._credentials is not None:
            if _may_receive_credentials(realm_url, self.image.api_host):
                headers["Authorization"] = _basic(self._credentials)
            else:
                from kvtool.console import stderr
                from kvtool.termsafe import terminal_line

                stderr.print(
                    f"kvtool: warning: not sending credentials to the token realm "
                    f"{terminal_line(str(realm_url))} (not https, not {self.image.api_host}); "
                    "asking for an anonymous token",
                    markup=False,
                    soft_wrap=True,
                )
        self._progress(f"requesting a token from {realm_url.host}")
        try:
            with self._http.stream("GET", realm, params=params, headers=headers) as response:
                announced = _rate_limit(response.headers)
                self.rate_limit = announced or self.rate_limit
                if response.status_code == 429:
                    raise RateLimitedError(
                        f"{what}: token server {realm} rate-limited us (429)", announced
                    )
                if response.status_code in (401, 403):
                    raise AuthError(
                        f"{what}: token server {realm} rejected the credentials "
                        f"({response.status_code})"
                    )
                if response.status_code >= 400:
                    raise AuthError(f"{what}: token server {realm} answered {response.status_code}")
                body = _read_capped(
                    response, MAX_TOKEN_BYTES, f"token from {realm}", self._deadline
                )
        except httpx.HTTPError as exc:
            raise NetworkError(f"token server {realm}: {type(exc).__name__}: {exc}") from None
        data = load_json_object(body, f"token response from {realm}")
        token = data.get("token") or data.get("access_token")
        if not isinstance(token, str) or not token:
            raise AuthError(f"{what}: token server {realm} returned no token")
        return token


def _may_receive_credentials(realm: httpx.URL, registry_host: str) -> bool:
    """A registry's challenge names the token realm, so a hostile or hijacked registry
    could point it anywhere: credentials go over https, or to the registry's own host
    (any port: a registry and its token server on one machine)."""
    if realm.scheme == "https":
        return True
    registry_name = httpx.URL(f"http://{registry_host}/").host
    return realm.scheme == "http" and realm.host == registry_name


def _basic(credentials: Credentials | None) -> str:
    assert credentials is not None
    pair = f"{credentials.username}:{credentials.password}".encode()
    return "Basic " + base64.b64encode(pair).decode("ascii")


def _read_capped(
    response: httpx.Response, max_bytes: int, what: str, deadline: float | None = None
) -> bytes:
    """The body, refusing more than ``max_bytes``, bodies shorter than announced and a
    transfer still running at ``deadline`` (a ``time.monotonic()`` instant: a server
    that sends a byte a second never trips the per-read timeout)."""
    declared = _announced_length(response)
    if declared is not None and declared > max_bytes:
        shown = str(declared) if declared < _TOO_LONG else f"over {_TOO_LONG}"
        raise RefusedError(f"{what}: {shown} bytes announced, over the {max_bytes}-byte cap")
    chunks: list[bytes] = []
    total = 0
    try:
        for chunk in response.iter_bytes():
            _check_deadline(deadline, what)
            total += len(chunk)
            if total > max_bytes:
                raise RefusedError(f"{what}: body exceeds the {max_bytes}-byte cap")
            chunks.append(chunk)
    except httpx.HTTPError as exc:
        raise NetworkError(f"{what}: transfer failed: {type(exc).__name__}: {exc}") from None
    body = b"".join(chunks)
    encoded = response.headers.get("content-encoding", "identity") != "identity"
    is_head = response.request.method == "HEAD"
    if declared is not None and not encoded and not is_head and total != declared:
        raise RefusedError(f"{what}: truncated, {total} of {declared} announced bytes")
    return body


_LENGTH_DIGITS = 20  # more digits than this already exceed any cap
_TOO_LONG = 10**_LENGTH_DIGITS


def _announced_length(response: httpx.Response) -> int | None:
    """Content-Length as a number; None unless it is plain ASCII digits (``str.isdigit``
    also takes "²", which ``int`` refuses). A length of thousands of digits is not
    converted (Python refuses it): any over twenty digits is over every cap."""
    declared = response.headers.get("content-length", "")
    if not (declared.isascii() and declared.isdigit()):
        return None
    return int(declared) if len(declared) <= _LENGTH_DIGITS else _TOO_LONG


def _check_deadline(deadline: float | None, what: str) -> None:
    if deadline is not None and time.monotonic() > deadline:
        raise NetworkError(limits.HTTP_DEADLINE_S.message(what))


def _rate_limit(headers: httpx.Headers) -> RateLimit | None:
    limit = headers.get("ratelimit-limit")
    remaining = headers.get("ratelimit-remaining")
    source = headers.get("docker-ratelimit-source")
    if limit is None and remaining is None:
        return None
    return RateLimit(limit=limit, remaining=remaining, source=source)


def _error_detail(response: httpx.Response) -> str:
    """The registry's first error code and message, e.g. ``: MANIFEST_UNKNOWN manifest unknown``."""
    try:
        body = _read_capped(response, 64 * 1024, "error body")
        data = load_json_object(body, "error body")
    except InspectError:
        return ""
    errors = data.get("errors")
    if isinstance(errors, list) and errors and isinstance(errors[0], dict):
        return f": {errors[0].get('code', '')} {errors[0].get('message', '')}".rstrip()
    return ""
