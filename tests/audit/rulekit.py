"""Build rule contexts directly (no input reader, no normaliser) for golden rule tests.

Release facts, the cross-release index and the curated semantics are the real
shipped tables, so a golden test checks a rule against the wheels' facts.
"""

from __future__ import annotations

from typing import Any

import msgspec

from kvtool.audit.context import ModelFacts, RuleContext
from kvtool.audit.engine import Selection, check_config
from kvtool.audit.model import (
    EnvAssignment,
    Finding,
    Invocation,
    Location,
    ParseProblem,
    ServeConfig,
    ServeOption,
    SourceToken,
)
from kvtool.audit.registry import registry
from kvtool.audit.semantics import load_semantics
from kvtool.audit.tables import ShippedTables
from kvtool.releases import load_release, release_index

FILE = "serve.sh"


def opt(flag: str, value: Any = True, *, written: str | None = None, line: int = 2) -> ServeOption:
    """An option as the normaliser would produce it (``known`` is filled in by :func:`config`)."""
    return ServeOption(
        flag=flag,
        value=value,
        written=written or flag,
        location=Location(file=FILE, line=line, column=3, end_column=3 + len(written or flag)),
    )


def config(
    version: str,
    *options: ServeOption,
    env: dict[str, str] | None = None,
    model: str | None = "meta-llama/Llama-3.1-8B-Instruct",
    problems: tuple[ParseProblem, ...] = (),
) -> ServeConfig:
    """A normalised config at ``version``; options the release lacks get ``known=False``."""
    facts = load_release(version)
    spellings = {f.name for f in facts.flags} | {f.negative for f in facts.flags if f.negative}
    marked = tuple(msgspec.structs.replace(o, known=o.flag in spellings) for o in options)
    json_values = {o.flag: o.value for o in marked if isinstance(o.value, dict)}
    tokens: list[SourceToken] = []
    for o in marked:
        tokens.append(SourceToken(text=o.written, location=o.location))
        if not isinstance(o.value, bool | dict) and o.value is not None:
            tokens.append(SourceToken(text=str(o.value)))
    assignments = {
        name: EnvAssignment(name=name, value=value, location=Location(file=FILE, line=1, column=8))
        for name, value in (env or {}).items()
    }
    invocation = Invocation(kind="shell", label=f"{FILE}:2", file=FILE, tokens=tuple(tokens))
    return ServeConfig(
        invocation=invocation,
        vllm_version=version,
        model=model,
        options=marked,
        json_values=json_values,
        env=assignments,
        problems=problems,
    )


def context(
    cfg: ServeConfig, *, host_ram_gib: float | None = None, model: ModelFacts | None = None
) -> RuleContext:
    return RuleContext(
        config=cfg,
        facts=load_release(cfg.vllm_version),
        index=release_index(),
        semantics=load_semantics(),
        host_ram_gib=host_ram_gib,
        known_model=model,
        # The shipped lookup (a local config.json, else rules/models/families.toml), as the
        # engine wires it: the default model is a known dense Llama.
        model_lookup=ShippedTables().model,
    )


# The security floor fires for every old release whatever the config; golden tests of the
# other rules leave it out so their expected lists stay about the config.
SECURITY_FLOOR = "SC001"


def run(
    cfg: ServeConfig,
    *,
    host_ram_gib: float | None = None,
    model: ModelFacts | None = None,
    security: bool = False,
) -> list[Finding]:
    """Every config rule's findings (default severities) for ``cfg``."""
    ctx = context(cfg, host_ram_gib=host_ram_gib, model=model)
    enabled = {rule.code for rule in registry if security or rule.code != SECURITY_FLOOR}
    return check_config(ctx, Selection(enabled=enabled))


def codes(findings: list[Finding]) -> list[str]:
    return sorted(f.code for f in findings)


def only(findings: list[Finding], code: str) -> Finding:
    """The single finding with ``code`` (fails when there is none or several)."""
    matching = [f for f in findings if f.code == code]
    assert len(matching) == 1, f"expected one {code}, got {[(f.code, f.message) for f in findings]}"
    return matching[0]


def ktc(**fields: Any) -> ServeOption:
    """``--kv-transfer-config`` with these JSON fields."""
    return opt("--kv-transfer-config", dict(fields))
