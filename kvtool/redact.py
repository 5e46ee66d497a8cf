"""Keep secrets out of everything kvtool prints or stores.

A URL may carry a password (``http://user:PASSWORD@host``) or a token in its query
(``?token=...``, a presigned ``X-Amz-Signature``); a header may carry a bearer token or
a key. Every URL and free-text message that can reach a stream, a report or a cache goes
through one of the functions below first (the CLI's error line included), so a secret
is never shown, whichever command met it. A header given wrong is never echoed at all
(:func:`kvtool.http.parse_header`). The user name stays (it says which account).
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

HIDDEN = "***"
# Query parameters that carry a credential: OAuth tokens, API keys, presigned signatures.
_SECRET_QUERY = re.compile(
    r"(?:.*token.*|.*secret.*|.*password.*|passwd|api[-_]?key|key|sig|signature|"
    r"x-amz-signature|x-amz-credential|x-amz-security-token|credential|auth)",
    re.IGNORECASE,
)
# In free text: the userinfo of any URL, and the credential after an auth scheme.
_URL_USERINFO = re.compile(
    r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]{0,30}://)(?P<userinfo>[^\s/?#@]{1,512})@"
)
_AUTH_VALUE = re.compile(
    r"(?P<scheme>\b(?:Bearer|Basic|Token|Digest|ApiKey)\s+)(?P<secret>[^\s,;'\"]+)",
    re.IGNORECASE,
)
_SECRET_QUERY_IN_TEXT = re.compile(
    r"(?P<name>[?&](?:[A-Za-z0-9_.-]*(?:token|secret|password|signature|api[-_]?key)"
    r"[A-Za-z0-9_.-]*|key|sig|auth|credential))=(?P<value>[^\s&#'\"]+)",
    re.IGNORECASE,
)


def url(text: str) -> str:
    """``text`` (a URL) with its password and secret query values replaced by ``***``.

    A user name alone (``http://token@host``, as GitHub tokens are passed) is hidden
    too: it cannot be told from a credential.
    """
    try:
        parts = urlsplit(text)
    except ValueError:
        return message(text)
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, host = netloc.rpartition("@")
        user, sep, _ = userinfo.partition(":")
        netloc = f"{user}:{HIDDEN}@{host}" if sep else f"{HIDDEN}@{host}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        if any(_SECRET_QUERY.fullmatch(name) for name, _ in pairs):
            query = urlencode(
                [(n, HIDDEN if _SECRET_QUERY.fullmatch(n) else v) for n, v in pairs], safe="*"
            )
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def message(text: str) -> str:
    """Free text (an error message, a note) with every URL password, auth credential and
    secret query value in it replaced by ``***``. Linear time in ``message``."""
    text = _URL_USERINFO.sub(
        lambda m: m.group("scheme") + _masked_userinfo(m.group("userinfo")) + "@", text
    )
    text = _AUTH_VALUE.sub(lambda m: m.group("scheme") + HIDDEN, text)
    return _SECRET_QUERY_IN_TEXT.sub(lambda m: f"{m.group('name')}={HIDDEN}", text)


def _masked_userinfo(userinfo: str) -> str:
    user, sep, _ = userinfo.partition(":")
    return f"{user}:{HIDDEN}" if sep else HIDDEN
