"""The LMCache server that ``LMCacheMPConnector`` auto-starts inside the engine's container.

With ``"lmcache.mp.autostart": true`` the connector runs the server as a child process
with ``lmcache.mp.autostart.server_args`` (one shell-quoted string) appended to its
command (LMCache ``lmcache/integration/vllm/mp_server_launcher.py``), so the server's
options - its chunk size, its L1 size - are written in the serve config.
"""

from __future__ import annotations

import shlex

from kvtool.audit.context import RuleContext

MP_CONNECTOR = "LMCacheMPConnector"
AUTOSTART = "lmcache.mp.autostart"
SERVER_ARGS = "lmcache.mp.autostart.server_args"


def _truthy(value: object) -> bool:
    if isinstance(value, bool):
        return value
    return isinstance(value, str) and value.strip().lower() in {"1", "true", "yes", "y", "on"}


def autostarted(ctx: RuleContext) -> bool:
    """The MP connector starts its own server in this container."""
    return any(
        name == MP_CONNECTOR and _truthy(extra.get(AUTOSTART))
        for name, extra in ctx.connector_extra_configs
    )


def server_option(ctx: RuleContext, option: str) -> str | None:
    """The value of ``option`` (``--opt v`` or ``--opt=v``) in the MP connector's
    ``server_args``; None when absent or unreadable."""
    for name, extra in ctx.connector_extra_configs:
        args = extra.get(SERVER_ARGS) if name == MP_CONNECTOR else None
        if not isinstance(args, str):
            continue
        try:
            words = shlex.split(args)
        except ValueError:
            return None
        for index, word in enumerate(words):
            key, has_value, value = word.partition("=")
            if key != option:
                continue
            if has_value:
                return value
            return words[index + 1] if index + 1 < len(words) else None
    return None
