"""VG030, VG032: `--kv-transfer-config` keys and value types against `KVTransferConfig`."""

from __future__ import annotations

import json
from collections.abc import Iterable

from kvtool.audit.context import KV_TRANSFER_CONFIG, RuleContext
from kvtool.audit.model import Finding, Severity
from kvtool.audit.references import KV_TRANSFER_CONFIG_032, Reference
from kvtool.audit.registry import ConfigRule, register
from kvtool.audit.rules._common import did_you_mean


@register
class UnknownKvTransferConfigKey(ConfigRule):
    """Reports a `--kv-transfer-config` key that the target release rejects.

    What
    ----
    A top-level key of the `--kv-transfer-config` JSON that is not a `KVTransferConfig`
    field at a release whose config classes forbid unknown keys.

    Why
    ---
    From 0.16.0 config dataclasses are pydantic `extra="forbid"`: the JSON fails at parse
    time. 0.32.0 removed `kv_buffer_size`, `kv_rank`, `kv_parallel_size` and `kv_ip`, so
    legacy P2P-NCCL JSON fails there.

    Example
    -------
    `{"kv_connector": "NixlConnector", "kv_buffer_size": 5e9}` on 0.32.0.

    Fix
    ---
    Delete the key, or use the suggested field.

    Releases
    --------
    Data-driven: `kv_transfer_config_fields` and `kv_transfer_config_forbids_extra` per release.
    """

    code = "VG030"
    name = "unknown-kv-transfer-config-key"
    default_severity = Severity.error
    summary = "--kv-transfer-config key rejected by the target vLLM release"
    references = (KV_TRANSFER_CONFIG_032,)
    since = "0.1.0"

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        if (
            not ctx.facts.kv_transfer_config_forbids_extra
            or not ctx.facts.kv_transfer_config_fields
        ):
            return
        fields = [f.name for f in ctx.facts.kv_transfer_config_fields]
        for key in ctx.kv_transfer_config:
            if key in fields:
                continue
            yield self.finding(
                f"`{key}` is not a KVTransferConfig field in vLLM {ctx.version}, which "
                "rejects unknown "
                "keys at parse time." + did_you_mean(key, fields),
                flag=f"{KV_TRANSFER_CONFIG}.{key}",
                location=ctx.location_of(KV_TRANSFER_CONFIG),
            )


# Strings pydantic's lax mode turns into a bool (its documented conversion table).
_BOOL_STRINGS = frozenset({"0", "1", "true", "false", "t", "f", "yes", "no", "y", "n", "on", "off"})


def _lax_accepts(base: str, value: object) -> bool | None:
    """Whether pydantic's lax mode accepts ``value`` for the plain type ``base``, or None
    when the annotation is not one kvtool can judge (aliases, unions of models, ...)."""
    if base == "str":
        return isinstance(value, str)
    if base == "bool":
        return isinstance(value, bool | int) or (
            isinstance(value, str) and value.strip().lower() in _BOOL_STRINGS
        )
    if base in ("int", "float"):
        if isinstance(value, bool | int) or (isinstance(value, float) and base == "float"):
            return True
        if isinstance(value, float):
            return value.is_integer()
        if isinstance(value, str):
            try:
                number = float(value)
            except ValueError:
                return False
            return base == "float" or number.is_integer()
        return False
    if base.startswith("dict["):
        return isinstance(value, dict)
    if base.startswith("list["):
        return isinstance(value, list)
    return None


def kv_transfer_value_problem(
    annotation: str, choices: tuple[str, ...] | None, value: object
) -> str | None:
    """Why ``value`` fails a ``KVTransferConfig`` field annotated ``annotation``, or None.

    ``choices`` (Literal fields and aliases such as ``KVRole``) are checked first; other
    annotations only when they are a plain type, optionally ``| None``.
    """
    parts = [part.strip() for part in annotation.split("|")]
    optional = "None" in parts
    if value is None:
        return None if optional or (choices is not None and "None" in choices) else "null"
    if choices is not None:
        return None if isinstance(value, str) and value in choices else "choice"
    bases = [part for part in parts if part != "None"]
    if len(bases) != 1:
        return None
    accepted = _lax_accepts(bases[0], value)
    return None if accepted is None or accepted else "type"


@register
class KvTransferConfigValueType(ConfigRule):
    """Reports a `--kv-transfer-config` value the target release's field type rejects.

    What
    ----
    A top-level `--kv-transfer-config` key whose value does not fit the `KVTransferConfig`
    field's type at the target release: a number where a string is expected
    (`"kv_connector": 5`), text where a port number is expected, a `kv_role` or
    `kv_load_failure_policy` outside its choices, or `null` for a field that is not optional.

    Why
    ---
    From the release where config classes are validated pydantic dataclasses (the same
    release that starts rejecting unknown keys, 0.16.0), such a value stops the server at
    argument parsing with a validation error, after the image has been pulled and started.

    Example
    -------
    `{"kv_connector": "NixlConnector", "kv_role": "both", "kv_port": "auto"}` on 0.32.0.

    Fix
    ---
    Write the value with the field's type, or one of the listed choices.

    Releases
    --------
    Data-driven: field annotations and choices from `kv_transfer_config_fields`; checked where
    `kv_transfer_config_forbids_extra` is true. Lax-mode conversions pydantic performs
    (`"14579"` for an int, `"true"` for a bool) are accepted; annotations kvtool cannot judge
    are skipped rather than guessed.
    """

    code = "VG032"
    name = "kv-transfer-config-value-type"
    default_severity = Severity.error
    summary = "--kv-transfer-config value of the wrong type for the target vLLM release"
    references = (
        KV_TRANSFER_CONFIG_032,
        Reference(
            "https://docs.pydantic.dev/latest/concepts/conversion_table/",
            "pydantic's conversion table (how the config's values are coerced)",
        ),
    )
    since = "0.1.0"

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        if not ctx.facts.kv_transfer_config_forbids_extra:
            return
        fields = {f.name: f for f in ctx.facts.kv_transfer_config_fields}
        for key, value in ctx.kv_transfer_config.items():
            field = fields.get(key)
            if field is None:
                continue  # VG030's finding
            problem = kv_transfer_value_problem(field.annotation, field.choices, value)
            if problem is None:
                continue
            expected = (
                "one of " + ", ".join(f"`{c}`" for c in field.choices)
                if field.choices is not None
                else f"`{field.annotation}`"
            )
            yield self.finding(
                f"`{key}` is {json.dumps(value)} but vLLM {ctx.version} expects {expected}; "
                "the server stops at argument parsing.",
                flag=f"{KV_TRANSFER_CONFIG}.{key}",
                location=ctx.location_of(KV_TRANSFER_CONFIG),
            )
