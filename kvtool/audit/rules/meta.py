"""KV: findings about the audit's own inputs (suppressions), raised by the engine.

These rules have no ``check``: the suppression stage of :mod:`kvtool.audit.engine`
raises them after every config rule has run, because only then is it known which
suppressions matched something.
"""

from __future__ import annotations

from kvtool.audit.model import Severity
from kvtool.audit.references import (
    RUFF_SUPPRESSION,
    Reference,
)
from kvtool.audit.registry import Rule, register


@register
class UnusedSuppression(Rule):
    """Reports a suppression that silenced nothing.

    What
    ----
    An inline `# kvtool: ignore[CODE] reason` comment or a `kvtool.io/ignore` annotation whose
    codes matched no finding where it applies (the analog of ruff's RUF100).

    Why
    ---
    Stale suppressions hide the next real finding on that line, long after the problem they
    excused was fixed.

    Example
    -------
    `--kv-offloading-size 800  # kvtool: ignore[SZ001] sized per GPU on purpose` when SZ001
    no longer fires.

    Fix
    ---
    Delete the suppression (or the unused codes in it).

    Releases
    --------
    Independent of the vLLM release.
    """

    code = "KV000"
    name = "unused-suppression"
    default_severity = Severity.warning
    summary = "suppression that matched no finding"
    references = (
        RUFF_SUPPRESSION,
        Reference("https://docs.astral.sh/ruff/rules/unused-noqa/", "ruff's RUF100 unused-noqa"),
    )
    since = "0.1.0"


@register
class SuppressionWithoutReason(Rule):
    """Reports a suppression without a reason.

    What
    ----
    `# kvtool: ignore[CODE]` with nothing after the closing bracket, or a `kvtool.io/ignore`
    annotation entry `CODE` without `=reason`.

    Why
    ---
    A suppression is a decision someone must be able to revisit; without a reason nobody can
    tell whether it still holds.

    Example
    -------
    `# kvtool: ignore[CN010]`.

    Fix
    ---
    Add the reason after the bracket: `# kvtool: ignore[CN010] flag kept for the 0.21 canary`.

    Releases
    --------
    Independent of the vLLM release.
    """

    code = "KV001"
    name = "suppression-without-reason"
    default_severity = Severity.warning
    summary = "suppression without a reason"
    references = (RUFF_SUPPRESSION,)
    since = "0.1.0"


@register
class UnknownRuleInSuppression(Rule):
    """Reports a suppression or setting that names no rule.

    What
    ----
    A code or rule name in a suppression that no registered rule has.

    Why
    ---
    A misspelt code silences nothing while looking like it does.

    Example
    -------
    `# kvtool: ignore[SZ999] reason` (no rule has that code; `SZ01` would be a valid prefix).

    Fix
    ---
    Use a code or name from `kvtool rule --all`.

    Releases
    --------
    Independent of the vLLM release.
    """

    code = "KV002"
    name = "unknown-rule-in-suppression"
    default_severity = Severity.warning
    summary = "suppression names no known rule"
    references = (RUFF_SUPPRESSION,)
    since = "0.1.0"
