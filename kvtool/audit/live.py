"""Read a running vLLM server's effective configuration for ``kvtool audit --url``.

The server is asked only what its OpenAI-compatible API already serves:

* ``/version``: the release, which becomes the audit's target;
* ``/v1/models``: the model path (``root``), served name and ``max_model_len``;
* ``/metrics``: ``vllm:cache_config_info`` (CacheConfig's fields as labels, i.e. the
  configured values after vLLM resolved them) and the metric families a KV connector
  registers (``kvtool:*`` for kvtool's connector);
* ``/server_info?config_format=json`` when the server answers it (development mode
  only, ``VLLM_SERVER_DEV_MODE=1``): the KV transfer config and parallel sizes.

From those it writes the serve arguments that differ from the release table's defaults,
as an argv :class:`~kvtool.audit.model.Invocation` whose tokens point at the endpoint
that reported them, so the audit runs the same rules on it as on a file. Every request
goes to the given URL's host only, through :mod:`kvtool.http`: redirects are not
followed, each body is capped at :data:`MAX_BODY_BYTES`, each request (connect, headers
and body) held to :data:`TIMEOUT_S` or ``http_deadline_s`` if lower. A password in the
URL is used, never shown: labels, notes and errors carry the URL redacted.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import msgspec

from kvtool import limits, redact
from kvtool.audit.model import Invocation, Location, SourceToken
from kvtool.errors import KvtoolError
from kvtool.nesting import loads_json
from kvtool.releases import load_release, resolve_target
from kvtool.releases.model import FlagFact, ReleaseFacts
from kvtool.versions import Version

if TYPE_CHECKING:
    from kvtool.http import Client

TIMEOUT_S = 10.0  # per request: connect plus the whole body
MAX_BODY_BYTES = 16 * 2**20  # a /metrics page of a large deployment stays far below this

CACHE_INFO = "vllm:cache_config_info"
# CacheConfig fields whose flag's argparse dest has another name (vllm/engine/arg_utils.py
# at v0.32.0: ``"--kv-cache-dtype", **cache_kwargs["cache_dtype"]``,
# https://github.com/vllm-project/vllm/blob/v0.32.0/vllm/engine/arg_utils.py).
FIELD_DEST = {"cache_dtype": "kv_cache_dtype"}
# kvtool's own connector registers ``kvtool:*`` families (kvtool/connector/vllm/metrics.py,
# KvtoolPromMetrics); its class and module as --kv-transfer-config names them.
KVTOOL_METRIC_PREFIX = "kvtool:"
KVTOOL_CONNECTOR = {
    "kv_connector": "KvtoolConnector",
    "kv_connector_module_path": "kvtool.connector.vllm",
}
# /server_info sections read for flags (scalars only; the rest is not a serve flag).
SERVER_INFO_SECTIONS = ("cache_config", "parallel_config")


class LiveServer(msgspec.Struct, kw_only=True):
    url: str
    version: str  # as /version reports it
    invocation: Invocation
    endpoints: tuple[str, ...]  # the paths that answered


def base_url(url: str) -> str:
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 -- raises for a port that is not a number in 0-65535
    except ValueError as exc:
        shown = redact.url(url)
        raise KvtoolError(f"--url: {shown!r} is not a URL ({redact.message(str(exc))})") from None
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise KvtoolError(f"--url: {redact.url(url)!r} is not an http(s)://HOST:PORT URL")
    return f"{parts.scheme}://{parts.netloc}{parts.path.rstrip('/')}"


def _get(client: Client, url: str, *, optional: bool = False) -> bytes | None:
    """The body of ``url``; None for an optional endpoint that is not there."""
    from kvtool.http import HEADER_ENV, Deadline, HttpError

    shown = redact.url(url)
    deadline = Deadline(min(TIMEOUT_S, limits.HTTP_DEADLINE_S.value))
    try:
        with client.stream("GET", url, deadline=deadline) as response:
            if optional and response.status != 200:
                return None
            if response.status in (401, 403):
                raise KvtoolError(
                    f"--url: {shown}: HTTP {response.status}; pass the server's API key "
                    f"with --header 'Authorization: Bearer KEY' or ${HEADER_ENV}"
                )
            if response.status != 200:
                raise KvtoolError(f"--url: {shown}: HTTP {response.status}")
            return response.body(MAX_BODY_BYTES)
    except HttpError as error:
        raise KvtoolError(f"--url: {error}") from None


def _json(body: bytes | None, url: str) -> Any:
    shown = redact.url(url)
    try:
        return loads_json(body or b"null", f"--url: {shown}: the answer")
    except ValueError:
        raise KvtoolError(f"--url: {shown}: the answer is not JSON") from None


def _flag_for(facts: ReleaseFacts, field: str) -> FlagFact | None:
    dest = FIELD_DEST.get(field, field)
    return next((f for f in facts.flags if f.dest == dest), None)


def _default_text(flag: FlagFact) -> str:
    default = flag.config_default if flag.cli_default_overridden else flag.default
    return str(default)


def _words(flag: FlagFact, text: str) -> list[str]:
    """The argv words setting ``flag`` to the Python-``str`` value ``text``; [] when the
    value is vLLM's default, unset, or not expressible as one flag value."""
    if text in ("None", _default_text(flag)) or text.startswith(("[", "{")):
        return []
    if flag.value == "none":  # a boolean: --X / --no-X
        if text == "True":
            return [flag.name]
        return [flag.negative] if text == "False" and flag.negative else []
    return [flag.name, text]


class _Argv:
    """Words of the effective command, each remembering the endpoint that reported it."""

    def __init__(self) -> None:
        self.tokens: list[SourceToken] = []
        self.flags: set[str] = set()

    def add(self, words: list[str], where: str) -> None:
        if not words or words[0] in self.flags:
            return
        if words[0].startswith("-"):
            self.flags.add(words[0])
        location = Location(file=where)
        self.tokens += [SourceToken(text=w, location=location) for w in words]


def _add_fields(argv: _Argv, facts: ReleaseFacts, fields: Mapping[str, Any], where: str) -> None:
    for field, value in fields.items():
        flag = _flag_for(facts, field)
        if flag is not None and not isinstance(value, dict | list):
            argv.add(_words(flag, str(value)), where)


def _transfer_config(facts: ReleaseFacts, config: Mapping[str, Any]) -> dict[str, Any]:
    """The keys of a dumped KVTransferConfig that differ from the release's defaults
    (``engine_id`` is a per-process uuid vLLM generates, not configuration)."""
    defaults = {f.name: f.default for f in facts.kv_transfer_config_fields}
    return {
        k: v for k, v in config.items() if k in defaults and v != defaults[k] and k != "engine_id"
    }


def _public(version: str) -> str:
    """``0.32.0+cpu`` -> ``0.32.0``: a build's local label names no other release."""
    try:
        return Version(version).public
    except ValueError:  # InvalidVersion, or digits past the int_digits limit
        return version


def read_live(url: str, headers: Mapping[str, str]) -> LiveServer:
    """The running server's effective configuration as one invocation."""
    from kvtool.http import Client
    from kvtool.verify.prometheus import parse

    base = base_url(url)
    with Client(headers=headers) as client:
        version_doc = _json(_get(client, f"{base}/version"), f"{base}/version")
        models_doc = _json(_get(client, f"{base}/v1/models"), f"{base}/v1/models")
        metrics_text = (_get(client, f"{base}/metrics") or b"").decode("utf-8", "replace")
        info_url = f"{base}/server_info?config_format=json"
        info_body = _get(client, info_url, optional=True)
    where = redact.url(base)  # what labels, notes and errors show: no password
    version = version_doc.get("version") if isinstance(version_doc, dict) else None
    if not isinstance(version, str):
        raise KvtoolError(f"--url: {where}/version names no vLLM version")
    version = _public(version)
    facts = load_release(resolve_target(version, None, origin=f"{where}/version").version)
    endpoints = ["/version", "/v1/models", "/metrics"]
    argv = _Argv()
    notes: list[str] = []
    models = models_doc.get("data") if isinstance(models_doc, dict) else None
    if not isinstance(models, list) or not models or not isinstance(models[0], dict):
        raise KvtoolError(f"--url: {where}/v1/models lists no model")
    served = models[0]
    root = str(served.get("root") or served.get("id"))
    argv.tokens.append(SourceToken(text=root, location=Location(file=f"{where}/v1/models")))
    if served.get("id") and served["id"] != root:
        argv.add(["--served-model-name", str(served["id"])], f"{where}/v1/models")
    if served.get("max_model_len"):
        argv.add(["--max-model-len", str(served["max_model_len"])], f"{where}/v1/models")

    snapshot = parse(metrics_text, f"{where}/metrics")
    cache_info = snapshot.named(CACHE_INFO)
    if cache_info:
        labels = {k: v for k, v in cache_info[0].labels if k != "engine"}
        _add_fields(argv, facts, labels, f"{where}/metrics {CACHE_INFO}")
    else:
        notes.append(f"{where}/metrics has no {CACHE_INFO}: cache settings are unknown")

    info = _json(info_body, info_url) if info_body is not None else None
    config = info.get("vllm_config") if isinstance(info, dict) else None
    transfer: dict[str, Any] = {}
    if isinstance(config, dict):
        endpoints.append("/server_info")
        for section in SERVER_INFO_SECTIONS:
            if isinstance(config.get(section), dict):
                _add_fields(argv, facts, config[section], f"{where}/server_info {section}")
        if isinstance(config.get("kv_transfer_config"), dict):
            transfer = _transfer_config(facts, config["kv_transfer_config"])
    elif any(s.name.startswith(KVTOOL_METRIC_PREFIX) for s in snapshot.samples):
        transfer = dict(KVTOOL_CONNECTOR)
        notes.append(
            f"{where}/metrics has kvtool:* metrics, so kvtool's connector is loaded; "
            "its other --kv-transfer-config keys are not served outside development mode"
        )
    else:
        notes.append(
            f"{where}/server_info is not served (development mode only): the KV connector "
            "and parallel sizes are read from /metrics alone"
        )
    # A connector vLLM made from --kv-offloading-* is already described by those flags.
    if transfer and "--kv-offloading-size" not in argv.flags:
        argv.add(
            ["--kv-transfer-config", json.dumps(transfer, separators=(",", ":"))],
            f"{where}/server_info kv_transfer_config" if config else f"{where}/metrics",
        )
    command = shlex.join(["vllm", "serve", *(t.text for t in argv.tokens)])
    invocation = Invocation(
        kind="argv",
        label=f"{where} (running vLLM {version})",
        tokens=tuple(argv.tokens),
        notes=(f"effective configuration: {command}", *notes),
    )
    return LiveServer(url=where, version=version, invocation=invocation, endpoints=tuple(endpoints))
