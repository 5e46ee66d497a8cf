"""Env vars a release replaced with a flag, migrated to that flag by ``upgrade --fix``.

The release index names the replacement (``VLLM_PREFIX_CACHE_RETENTION_INTERVAL`` ->
``--prefix-cache-retention-interval``); the fix sets that flag to the env var's value
after the command's last word, as an ordinary token fix of the audit.
"""

from __future__ import annotations

import re

from kvtool.audit.model import REWRITABLE, Finding, Fix, Invocation
from kvtool.releases import load_release, release_index

# Env var findings a flag can replace: removed (VG011) or deprecated (VG012) at the target.
ENV_CODES = ("VG011", "VG012")
_FLAG = re.compile(r"--[a-z0-9][a-z0-9-]*")


def env_flag_fix(finding: Finding, invocation: Invocation, version: str) -> Fix | None:
    """The fix setting the replacement flag of ``finding``'s env var at ``version``; None
    when there is no such flag, the value is unknown or rejected, the flag is already set,
    or the input cannot be rewritten."""
    if finding.code not in ENV_CODES or invocation.kind not in REWRITABLE:
        return None
    if invocation.kind == "argv":
        return None
    anchor = next((t for t in reversed(invocation.tokens) if not t.conditional), None)
    gate = release_index().env_vars.get(finding.flag or "")
    flag = gate.replacement if gate is not None else None
    if anchor is None or flag is None or not _FLAG.fullmatch(flag):
        return None
    if flag in {t.text.split("=", 1)[0] for t in invocation.tokens}:
        return None
    fact = next((f for f in load_release(version).flags if f.name == flag), None)
    env = next((e for e in invocation.env if e.name == finding.flag), None)
    if fact is None or fact.value != "required" or env is None:
        return None
    if env.value is None or env.conditional:
        return None
    if fact.choices is not None and env.value not in fact.choices:
        return None  # the flag would reject the value: leave it to the finding
    return Fix(
        applicability="safe",
        description=f"set {flag} {env.value} instead of {env.name}",
        remove_tokens=(anchor,),
        replacement=(flag, env.value),
        insert_after=True,
    )
