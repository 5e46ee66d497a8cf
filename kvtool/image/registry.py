"""A read-only registry client (distribution spec v2 / OCI distribution) on :mod:`kvtool.http`.

It answers the auth challenge it is given (anonymous or credentialed Bearer tokens,
Basic), sends all four manifest media types, follows redirects to blob storage
(httpx drops ``Authorization`` across origins, as presigned URLs require), caps and
verifies every body, and remembers the registry's rate-limit headers. One deadline
(``http_deadline_s``) holds the whole inspection, every socket operation included.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import TracebackType

import httpx

from kvtool import limits, redact
from kvtool.http import Client, Deadline, HttpError, HttpRefused, Response
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
        self._http = Client(
            transport=transport,
            follow_redirects=True,
            max_redirects=MAX_REDIRECTS,
            headers={"User-Agent": "kvtool-inspect-image"},
            deadline=Deadline(limits.HTTP_DEADLINE_S.value),
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
            ) as response:
                digest = response.headers.get("docker-content-digest")
        except NotFoundError:
            return None  # a HEAD has no error body; the GET that follows reports the details
        return digest if digest and DIGEST_RE.match(digest) else None

    def fetch_manifest(self, reference: str) -> Document:
        what = f"manifest {self.image.repository}:{reference}"
        self._progress(f"fetching {what}")
        with self._request("GET", f"/manifests/{reference}", what=what) as response:
            body = _read_capped(response, MAX_MANIFEST_BYTES, what)
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
            body = _read_capped(response, max_bytes, what)
        verify_digest(digest, body, what)
        return body

    # -- transport and auth -----------------------------------------------------------

    @contextmanager
    def _request(self, method: str, path: str, *, what: str) -> Iterator[Response]:
        url = self._base + path
        with self._send(method, url) as response:
            if response.status != 401:
                self._check(response, what)
                yield response
                return
            challenge = response.headers.get("www-authenticate")
        if not challenge:
            raise AuthError(f"{what}: 401 from {self.image.api_host} without a challenge")
        self._answer(parse_challenge(challenge), what)
        with self._send(method, url) as response:
            self._check(response, what)
            yield response

    @contextmanager
    def _send(
        self,
        method: str,
        url: str,
        *,
        headers: dict[str, str] | None = None,
        params: list[tuple[str, str]] | None = None,
    ) -> Iterator[Response]:
        if headers is None:
            headers = {"Accept": ACCEPT}
            if self._authorization:
                headers["Authorization"] = self._authorization
        with _classified(""), self._http.stream(
            method, url, headers=headers, params=params
        ) as response:
            yield response

    def _check(self, response: Response, what: str) -> None:
        announced = _rate_limit(response.headers)
        if announced is not None:
            self.rate_limit = announced
        status = response.status
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
        params: list[tuple[str, str]] = []
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
        shown_realm = redact.url(realm)
        with self._send("GET", realm, params=params, headers=headers) as response:
            announced = _rate_limit(response.headers)
            self.rate_limit = announced or self.rate_limit
            if response.status == 429:
                raise RateLimitedError(
                    f"{what}: token server {shown_realm} rate-limited us (429)", announced
                )
            if response.status in (401, 403):
                raise AuthError(
                    f"{what}: token server {shown_realm} rejected the credentials "
                    f"({response.status})"
                )
            if response.status >= 400:
                raise AuthError(f"{what}: token server {shown_realm} answered {response.status}")
            body = _read_capped(response, MAX_TOKEN_BYTES, f"token from {shown_realm}")
        data = load_json_object(body, f"token response from {shown_realm}")
        token = data.get("token") or data.get("access_token")
        if not isinstance(token, str) or not token:
            raise AuthError(f"{what}: token server {shown_realm} returned no token")
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


def _read_capped(response: Response, max_bytes: int, what: str) -> bytes:
    """The body within ``max_bytes`` and the inspection's deadline (see
    :meth:`kvtool.http.Response.body`), failures named after ``what``."""
    with _classified(what):
        return response.body(max_bytes)


@contextmanager
def _classified(what: str) -> Iterator[None]:
    """:mod:`kvtool.http`'s failures as inspection errors: a refused answer (too big,
    truncated, a loop of redirects) is ``refused``, the rest ``network``. ``what`` names
    the step in place of the URL (a body), or "" to keep the URL (a request)."""
    try:
        yield
    except HttpError as error:
        message = f"{what}: {error.reason}" if what else str(error)
        if isinstance(error, HttpRefused):
            raise RefusedError(message) from None
        raise NetworkError(message) from None


def _rate_limit(headers: httpx.Headers) -> RateLimit | None:
    limit = headers.get("ratelimit-limit")
    remaining = headers.get("ratelimit-remaining")
    source = headers.get("docker-ratelimit-source")
    if limit is None and remaining is None:
        return None
    return RateLimit(limit=limit, remaining=remaining, source=source)


def _error_detail(response: Response) -> str:
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
