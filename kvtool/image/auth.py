"""Registry credentials and ``WWW-Authenticate`` challenges.

Credentials come from ``--username``/``--password-stdin`` or the Docker config file
(``$DOCKER_CONFIG/config.json``, else ``~/.docker/config.json``): ``auths[host].auth``
(base64 ``user:pass``), ``credHelpers[host]`` or ``credsStore`` (``docker-credential-*``);
then podman's auth file (``$REGISTRY_AUTH_FILE``, else
``$XDG_RUNTIME_DIR/containers/auth.json``), which has the same ``auths`` shape.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from kvtool.errors import KvtoolError
from kvtool.fsio import read_input_text
from kvtool.image.reference import DOCKER_HUB_ALIASES
from kvtool.nesting import loads_json

# Docker stores Hub credentials under its v1 index URL, not under a host name.
DOCKER_HUB_CONFIG_KEY = "https://index.docker.io/v1/"
CREDENTIAL_HELPER_TIMEOUT_S = 30

_AUTH_PARAM_RE = re.compile(
    r'\s*([!#$%&\'*+.^_`|~\w-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s,]*))\s*,?'
)


@dataclass(frozen=True)
class Credentials:
    username: str
    password: str


@dataclass(frozen=True)
class Challenge:
    """One parsed ``WWW-Authenticate`` header: scheme plus auth-params (RFC 7235)."""

    scheme: str  # lowercased: "bearer" or "basic"
    params: dict[str, str]


def parse_challenge(header: str) -> Challenge:
    """Parse ``Bearer realm="…",service="…",scope="repository:x:pull,push"``.

    Quoted strings may hold commas and backslash escapes, so this is not a split on ",".
    """
    scheme, _, rest = header.strip().partition(" ")
    params: dict[str, str] = {}
    position = 0
    while position < len(rest):
        match = _AUTH_PARAM_RE.match(rest, position)
        if not match or match.end() == position:
            break
        quoted, bare = match.group(2), match.group(3)
        value = re.sub(r"\\(.)", r"\1", quoted) if quoted is not None else (bare or "")
        params[match.group(1).lower()] = value
        position = match.end()
    return Challenge(scheme.lower(), params)


def docker_config_path() -> Path:
    directory = os.environ.get("DOCKER_CONFIG")
    return Path(directory) / "config.json" if directory else Path.home() / ".docker" / "config.json"


def _config_keys(host: str) -> list[str]:
    """The keys Docker may have stored ``host``'s credentials under."""
    if host in DOCKER_HUB_ALIASES:
        return [DOCKER_HUB_CONFIG_KEY, "docker.io", "index.docker.io", "registry-1.docker.io"]
    return [host, f"https://{host}", f"http://{host}", f"https://{host}/v1/", f"https://{host}/v2/"]


def containers_auth_path() -> Path | None:
    explicit = os.environ.get("REGISTRY_AUTH_FILE")
    if explicit:
        return Path(explicit)
    runtime_dir = os.environ.get("XDG_RUNTIME_DIR")
    return Path(runtime_dir) / "containers" / "auth.json" if runtime_dir else None


def credentials_for(host: str) -> Credentials | None:
    """``host``'s stored credentials: the Docker config file first, then podman's."""
    found = credentials_from_docker_config(host)
    podman_file = containers_auth_path()
    if found is None and podman_file is not None:
        found = credentials_from_docker_config(host, podman_file)
    return found


def _read_config(path: Path) -> dict[str, object] | None:
    if not path.is_file():
        return None
    try:
        config = loads_json(read_input_text(path), str(path))
    except ValueError as exc:  # not JSON, or an integer past Python's digit limit
        raise KvtoolError(f"{path}: cannot read the registry auth file: {exc}") from None
    if not isinstance(config, dict):
        raise KvtoolError(f"{path}: the registry auth file is not a JSON object")
    return config


def credentials_from_docker_config(host: str, path: Path | None = None) -> Credentials | None:
    """``host``'s credentials from a Docker-format config file, or None when it has none."""
    path = path or docker_config_path()
    config = _read_config(path)
    if config is None:
        return None
    keys = _config_keys(host)
    helpers = config.get("credHelpers")
    if isinstance(helpers, dict):
        for key in keys:
            if isinstance(helpers.get(key), str):
                return _from_helper(helpers[key], key)
    auths = config.get("auths")
    if isinstance(auths, dict):
        for key in keys:
            entry = auths.get(key)
            if isinstance(entry, dict) and isinstance(entry.get("auth"), str) and entry["auth"]:
                return _decode_auth(entry["auth"], f"{path}: auths[{key!r}].auth")
    store = config.get("credsStore")
    if isinstance(store, str) and store:
        return _from_helper(store, keys[0])
    return None


def _decode_auth(encoded: str, where: str) -> Credentials:
    try:
        decoded = base64.b64decode(encoded, validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        raise KvtoolError(f"{where} is not base64 of user:password") from None
    username, sep, password = decoded.partition(":")
    if not sep:
        raise KvtoolError(f"{where} decodes to no ':' between user and password")
    return Credentials(username, password)


def _from_helper(helper: str, server: str) -> Credentials | None:
    program = f"docker-credential-{helper}"
    try:
        done = subprocess.run(
            [program, "get"],
            input=server,
            capture_output=True,
            text=True,
            timeout=CREDENTIAL_HELPER_TIMEOUT_S,
            check=False,
        )
    except FileNotFoundError:
        raise KvtoolError(
            f"the Docker config names credential helper {helper!r} but {program} is not on PATH"
        ) from None
    except subprocess.TimeoutExpired:
        raise KvtoolError(
            f"{program} get did not answer within {CREDENTIAL_HELPER_TIMEOUT_S} s"
        ) from None
    if done.returncode != 0:
        return None  # helpers exit 1 with "credentials not found in native keychain"
    try:
        answer = loads_json(done.stdout, f"{program} get")
        return Credentials(str(answer["Username"]), str(answer["Secret"]))
    except (ValueError, KeyError, TypeError):
        raise KvtoolError(f"{program} get printed no Username/Secret JSON") from None
