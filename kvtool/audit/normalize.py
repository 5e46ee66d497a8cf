"""Normalise an invocation the way ``vllm serve``'s parser does at one release.

vLLM parses serve arguments in two stages (vllm/engine/arg_utils.py):

1. ``FlexibleArgumentParser.parse_args`` rewrites argv: ``--model M`` moves to the
   positional model; ``--config FILE`` (the two-word form only) is replaced by the
   file's items, inserted after the model so that command-line flags win;
   underscores become dashes up to the first ``.``; ``-O3``/``-O=3``/``-O 3``
   become ``--optimization-level 3`` where that flag exists; dotted JSON keys
   (``--kv-transfer-config.kv_connector X``, ``...connectors+ a,b``) are merged per
   flag and appended at the end as one JSON argument.
2. argparse reads the result: exact option strings, ``--opt=value``, unambiguous
   prefixes (``allow_abbrev`` is never disabled), ``--no-X`` for boolean flags,
   optional-value flags, and the last occurrence of an option wins.

This module replays both stages against the option table of the target release
(``ReleaseFacts.flags``), keeping for every option where it was written. What
argparse would reject becomes a ``ParseProblem``; options the release does not
know are kept with ``known=False`` so a rule can suggest the right spelling.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import msgspec

from kvtool.audit.model import (
    Invocation,
    Location,
    ParseProblem,
    ServeConfig,
    ServeOption,
    SourceToken,
)
from kvtool.nesting import loads_json
from kvtool.numbers import MOST_INT, BadNumber, parse_float
from kvtool.releases.model import FlagFact, ReleaseFacts

OPTIMIZATION_LEVEL = "--optimization-level"
# argparse treats these as values, not options, unless an option looks like a number.
_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")
_MODEL_OPTION = re.compile(r"^--model(=.+|$)")
_BEFORE_FIRST_DOT = re.compile(r"(?<=--)[^.]*")
# vLLM's human-readable integers in dotted values: decimal k/m/g/t, binary K/M/G/T.
# A value that is still a variable reference after the reader expanded what it could
# (`"$KV_CONFIG"` in a script, `$(KV_CONFIG)` in a pod), or the output of a command
# (`"$(cat /etc/lmcache/kv.json)"`, backticks): the engine gets its runtime value.
_UNRESOLVED_VALUE = re.compile(
    r"\$(?:[A-Za-z_][A-Za-z0-9_]*|\{[A-Za-z_][^}]*\}|\([A-Za-z_]\w*\))"
    r"|\$\((?!\().*\)|`[^`]*`",
    re.DOTALL,
)
def _is_runtime_option(text: str) -> bool:
    """An option whose name holds a runtime value (``--${key}``, ``--$FLAG``)."""
    name = text.partition("=")[0]
    return name.startswith("-") and _UNRESOLVED_VALUE.search(name) is not None


_HUMAN_INT = re.compile(r"(\d+(?:\.\d+)?)([kKmMgGtT])")
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


class _Arg(msgspec.Struct):
    """One argv word on its way through the parser, with the token it came from."""

    text: str
    source: SourceToken
    written: str  # the option as the user spelled it (a config item: its YAML key)
    list_item: bool = False  # a later item of a config list: always extends the option


class _Dotted(msgspec.Struct):
    path: tuple[str, ...]
    value: Any
    arg: _Arg


class _DictArg(msgspec.Struct):
    """All dotted keys of one flag, merged, as vLLM appends them after the other args."""

    key: str
    value: dict[str, Any] = msgspec.field(default_factory=dict)
    parts: list[_Dotted] = msgspec.field(default_factory=list)


class _Match(msgspec.Struct, frozen=True):
    fact: FlagFact | None  # None: no such option at this release
    option: str  # the option string matched (or the unknown option as written)
    negative: bool = False
    explicit: str | None = None  # the value after '=' in --opt=value


class _OptionTable:
    """Every option string of a release, as argparse's ``_option_string_actions``."""

    def __init__(self, facts: ReleaseFacts) -> None:
        self.by_string: dict[str, tuple[FlagFact, bool]] = {}
        for fact in facts.flags:
            self.by_string[fact.name] = (fact, False)
            for alias in fact.aliases:
                self.by_string[alias] = (fact, False)
            if fact.negative:
                self.by_string[fact.negative] = (fact, True)
        self.has_negative_number_options = any(_NEGATIVE_NUMBER.match(s) for s in self.by_string)
        self.json_flags = frozenset(fact.name for fact in facts.flags if fact.json_config)

    def has(self, option: str) -> bool:
        return option in self.by_string

    def lookup(self, arg: str) -> _Match | list[str] | None:
        """argparse's ``_parse_optional``: a match, None (a positional) or ambiguous candidates."""
        if not arg or arg[0] != "-" or arg == "-":
            return None
        if arg in self.by_string:
            fact, negative = self.by_string[arg]
            return _Match(fact, arg, negative)
        if "=" in arg:
            option, given = arg.split("=", 1)
            if option in self.by_string:
                fact, negative = self.by_string[option]
                return _Match(fact, option, negative, given)
        candidates = self._prefix_matches(arg)
        if len(candidates) > 1:
            return sorted(c[0] for c in candidates)
        if len(candidates) == 1:
            option, explicit = candidates[0]
            fact, negative = self.by_string[option]
            return _Match(fact, option, negative, explicit)
        if _NEGATIVE_NUMBER.match(arg) and not self.has_negative_number_options:
            return None
        if " " in arg:
            return None
        option, has_value, explicit = arg.partition("=")
        return _Match(None, option, False, explicit if has_value else None)

    def _prefix_matches(self, arg: str) -> list[tuple[str, str | None]]:
        """argparse ``_get_option_tuples`` (allow_abbrev=True)."""
        found: list[tuple[str, str | None]] = []
        if arg.startswith("--"):
            prefix, has_value, explicit = arg.partition("=")
            for option in self.by_string:
                if option.startswith(prefix):
                    found.append((option, explicit if has_value else None))
        elif len(arg) > 1 and arg[1] != "-":
            short, short_explicit = arg[:2], arg[2:]
            for option in self.by_string:
                if option == short:
                    found.append((option, short_explicit))
                elif option.startswith(arg):
                    found.append((option, None))
        return found


def normalize(invocation: Invocation, facts: ReleaseFacts) -> ServeConfig:
    """The serve configuration vLLM ``facts.version`` would parse from ``invocation``."""
    return _Normalizer(invocation, facts).run()


# Option tables by release table identity: a batch audits many files against one release.
_TABLES: dict[int, tuple[ReleaseFacts, _OptionTable]] = {}
_TABLES_KEPT = 8


def _option_table(facts: ReleaseFacts) -> _OptionTable:
    cached = _TABLES.get(id(facts))
    if cached is not None and cached[0] is facts:
        return cached[1]
    if len(_TABLES) >= _TABLES_KEPT:
        _TABLES.clear()
    table = _OptionTable(facts)
    _TABLES[id(facts)] = (facts, table)
    return table


class _Normalizer:
    def __init__(self, invocation: Invocation, facts: ReleaseFacts) -> None:
        self.invocation = invocation
        self.facts = facts
        self.table = _option_table(facts)
        self.problems: list[ParseProblem] = []
        self.options: list[ServeOption] = []
        # Option index -> argparse "event" number; options sharing the last event of a flag win.
        self.events: list[int] = []
        self.model: str | None = None
        # JSON flag -> (event, merged dotted keys) for flags given as dotted keys.
        self.json_groups: dict[str, tuple[int, dict[str, Any]]] = {}

    # -- stage 1: FlexibleArgumentParser ------------------------------------
    def run(self) -> ServeConfig:
        args = [_Arg(t.text, t, t.text) for t in self.invocation.tokens]
        args = self._move_model_option(args)
        args = self._insert_config_items(args)
        args = self._rewrite_spellings(args)
        plain, dict_args = self._collect_dotted(args)
        self._parse(plain, dict_args)
        return self._result()

    def _move_model_option(self, args: list[_Arg]) -> list[_Arg]:
        """``vllm serve -tp 2 --model M`` -> ``vllm serve M -tp 2``."""
        index = next((i for i, a in enumerate(args) if _MODEL_OPTION.match(a.text)), None)
        if index is None:
            return args
        arg = args[index]
        if arg.text == "--model":
            if index + 1 >= len(args) or args[index + 1].text.startswith("-"):
                self._problem("argument --model: expected one argument", "--model", arg.source)
                return args[:index] + args[index + 1 :]
            model = args[index + 1]
            rest = args[:index] + args[index + 2 :]
        else:
            model = _Arg(arg.text.removeprefix("--model="), arg.source, arg.written)
            rest = args[:index] + args[index + 1 :]
        return [model, *rest]

    def _insert_config_items(self, args: list[_Arg]) -> list[_Arg]:
        """Config items go after the positional model, before the other command-line args."""
        if not self.invocation.config_items:
            return args
        texts = [a.text for a in args]
        if "--config" in texts:
            at = texts.index("--config")
            config_word = args[at]
            args = args[:at] + args[at + 2 :]
            model_in_config = any(key == "model" for key, _, _ in self.invocation.config_items)
            if not (args and not args[0].text.startswith("-")) and not model_in_config:
                # _pull_args_from_config refuses to start without a model anywhere.
                self._problem(
                    "No model specified! Please specify model either as a positional "
                    "argument or in a config file.",
                    "--config",
                    config_word.source,
                )
        synthetic: list[_Arg] = []
        for key, value, location in self.invocation.config_items:
            synthetic.extend(self._config_item_args(key, value, location))
        model_first = bool(args) and not args[0].text.startswith("-")
        head = args[:1] if model_first else []
        return head + synthetic + args[len(head) :]

    def _config_item_args(self, key: str, value: Any, location: Location | None) -> list[_Arg]:
        """vLLM's ``load_config_file``: how one YAML item becomes argv words."""
        source = SourceToken(text=f"{key}: {value!r}", location=location)

        def word(text: str) -> _Arg:
            return _Arg(text, source, key)

        option = f"--{key}"
        if isinstance(value, bool):
            if value:
                return [word(option)]
            negative = f"--no-{key}"
            # vLLM looks the raw key up, so ``enable_prefix_caching: false`` is dropped.
            return [word(negative)] if self.table.has(negative) else []
        if isinstance(value, list):
            items = [_Arg(str(item), source, key, list_item=True) for item in value]
            return [word(option), *items] if value else []
        if isinstance(value, dict):
            return [word(option), word(json.dumps(value))]
        return [word(option), word(str(value))]

    def _rewrite_spellings(self, args: list[_Arg]) -> list[_Arg]:
        """Underscores to dashes in option names; the ``-O`` shorthands."""
        has_level = self.table.has(OPTIMIZATION_LEVEL)
        result: list[_Arg] = []
        for position, arg in enumerate(args):
            text = arg.text
            if text.startswith("--"):
                name, has_value, value = text.partition("=")
                name = _BEFORE_FIRST_DOT.sub(lambda m: m.group(0).replace("_", "-"), name, count=1)
                result.append(
                    _Arg(name + (("=" + value) if has_value else ""), arg.source, arg.written)
                )
            elif text.startswith("-O") and text != "-O" and (has_level or text[2] != "."):
                level = text[3:] if text[2] == "=" else text[2:]
                option = OPTIMIZATION_LEVEL if has_level else "-O"
                result.append(_Arg(option, arg.source, arg.written))
                result.append(_Arg(level, arg.source, arg.written))
            elif (
                text == "-O"
                and has_level
                and position + 1 < len(args)
                and args[position + 1].text in {"0", "1", "2", "3"}
            ):
                result.append(_Arg(OPTIMIZATION_LEVEL, arg.source, arg.written))
            else:
                result.append(arg)
        return result

    def _collect_dotted(self, args: list[_Arg]) -> tuple[list[_Arg], list[_DictArg]]:
        """Take out ``--flag.key value`` words, merged per flag in first-seen order."""
        plain: list[_Arg] = []
        groups: dict[str, _DictArg] = {}
        skip_next = False
        for position, arg in enumerate(args):
            if skip_next:
                skip_next = False
                continue
            text = arg.text
            if not (text.startswith("-") and "." in text):
                plain.append(arg)
                continue
            if "=" in text:
                name, value_text = text.split("=", 1)
                if "." not in name:  # the dot was only in the value
                    plain.append(arg)
                    continue
            else:
                name = text
                if position + 1 >= len(args):
                    self._problem(f"argument {name}: expected a value", name, arg.source)
                    continue
                value_text = args[position + 1].text
                skip_next = True
            value: Any
            if name.endswith("+"):
                name = name[:-1]
                value = value_text.split(",")
            else:
                value = _dotted_value(value_text)
            key, *path = name.split(".")
            group = groups.setdefault(key, _DictArg(key))
            _merge(group.value, _nest(path, value))
            group.parts.append(_Dotted(tuple(path), value, arg))
        return plain, list(groups.values())

    # -- stage 2: argparse ----------------------------------------------------
    def _parse(self, plain: list[_Arg], dict_args: list[_DictArg]) -> None:
        position = 0
        event = 0
        only_positionals = False
        last_valued: int | None = None  # option that just took a value: a list may continue
        while position < len(plain):
            arg = plain[position]
            event += 1
            match = None if only_positionals else self.table.lookup(arg.text)
            if arg.text == "--" and not only_positionals:
                only_positionals = True
                position += 1
                continue
            if _is_runtime_option(arg.text) and not only_positionals:
                # `--${key}` (a launcher's f"--{key}"): an option named at run time; it
                # and the value after it are not judged, nor taken for the model.
                following = plain[position + 1].text if position + 1 < len(plain) else ""
                position += 1 if "=" in arg.text or following.startswith("-") else 2
                last_valued = None
                continue
            if isinstance(match, list):
                option = arg.text.partition("=")[0]
                self._problem(
                    f"ambiguous option: {option} could match {', '.join(match)}", option, arg.source
                )
                position += 1
                last_valued = None
                continue
            if match is None:
                self._positional(arg, last_valued)
                position += 1
                continue
            position, last_valued = self._option(match, arg, plain, position, event)
        for group in dict_args:
            event += 1
            self._dict_arg(group, event)

    def _positional(self, arg: _Arg, last_valued: int | None) -> None:
        if self.model is None and not (arg.list_item and last_valued is not None):
            self.model = arg.text
            return
        if _UNRESOLVED_VALUE.fullmatch(arg.text):
            # `... $EXTRA_ARGS`: words known only at run time, not one more list item
            return
        if last_valued is not None:
            # A list-valued flag (nargs='+', e.g. --served-model-name a b) continues.
            previous = self.options[last_valued]
            values = previous.value if isinstance(previous.value, list) else [previous.value]
            self.options[last_valued] = msgspec.structs.replace(previous, value=[*values, arg.text])
            return
        self._problem(f"unrecognized arguments: {arg.text}", None, arg.source)

    def _option(
        self, match: _Match, arg: _Arg, plain: list[_Arg], position: int, event: int
    ) -> tuple[int, int | None]:
        """Consume one option (and its value); returns the next position and, if it took
        a value, the option's index (a following stray word may extend a list)."""
        fact = match.fact
        written = arg.written.partition("=")[0] if arg.written.startswith("-") else arg.written
        following = plain[position + 1] if position + 1 < len(plain) else None
        takes_next = following is not None and self._is_value(following.text)
        if fact is None:
            value: Any = match.explicit
            consumed = 1
            # argparse sets an unknown option aside and gives the next word to a positional
            # still waiting (the model); after that, the word most likely is its value.
            if value is None and takes_next and following is not None and self.model is not None:
                value, consumed = following.text, 2
            self._add(
                arg, match.option, written, True if value is None else value, event, known=False
            )
            return position + consumed, None
        if fact.value == "none":
            if match.explicit is not None:
                self._problem(
                    f"argument {match.option}: ignored explicit argument '{match.explicit}'",
                    fact.name,
                    arg.source,
                )
            self._add(arg, fact.name, written, not match.negative, event)
            return position + 1, None
        consumed = 1
        raw: str | None = match.explicit
        if raw is None and takes_next and following is not None:
            raw, consumed = following.text, 2
        if raw is None:
            if fact.value == "optional":
                self._add(arg, fact.name, written, True, event)
                return position + 1, None
            self._problem(f"argument {match.option}: expected one argument", fact.name, arg.source)
            self._add(arg, fact.name, written, None, event)
            return position + 1, None
        value = self._json_value(fact, raw, arg) if fact.json_config else raw
        self._add(arg, fact.name, written, value, event)
        return position + consumed, len(self.options) - 1

    def _is_value(self, text: str) -> bool:
        """argparse's 'A' class: not an option-looking word."""
        if text == "--":
            return False
        return self.table.lookup(text) is None

    def _json_value(self, fact: FlagFact, raw: str, arg: _Arg) -> Any:
        if _UNRESOLVED_VALUE.fullmatch(raw):
            return None  # known only at run time: nothing to check, and no parse error
        try:
            # A value past a limit is not vLLM's to reject: kvtool could not read it, so
            # LimitExceeded ends the run (exit 2) instead of becoming a finding.
            value = loads_json(raw, f"argument {fact.name}")
        except json.JSONDecodeError as error:
            self._problem(
                f"argument {fact.name}: invalid JSON: {error.msg} "
                f"(line {error.lineno}, column {error.colno} of the value)",
                fact.name,
                arg.source,
            )
            return None
        # Python's json (and so vLLM's) reads NaN, Infinity and 1e999 as floats no size
        # or count can be made of: the value is reported, not handed to the rules.
        if _has_non_finite(value):
            self._problem(
                f"argument {fact.name}: holds NaN or an infinite number, which no size, "
                "count or rate can be",
                fact.name,
                arg.source,
            )
            return None
        return value

    def _dict_arg(self, group: _DictArg, event: int) -> None:
        match = self.table.lookup(group.key)
        if isinstance(match, list):
            first = group.parts[0].arg
            self._problem(
                f"ambiguous option: {group.key} could match {', '.join(match)}",
                group.key,
                first.source,
            )
            return
        fact = match.fact if isinstance(match, _Match) else None
        flag = fact.name if fact is not None else group.key
        if fact is not None and not fact.json_config:
            self._problem(
                f"argument {fact.name}: takes no dotted keys ({group.parts[0].arg.text})",
                fact.name,
                group.parts[0].arg.source,
            )
        for part in group.parts:
            written = part.arg.written.partition("=")[0]
            self._add(
                part.arg,
                flag,
                written,
                part.value,
                event,
                known=fact is not None,
                key_path=part.path,
            )
        if fact is not None and fact.json_config:
            self.json_groups[flag] = (event, group.value)

    # -- bookkeeping ----------------------------------------------------------
    def _add(
        self,
        arg: _Arg,
        flag: str,
        written: str,
        value: Any,
        event: int,
        *,
        known: bool = True,
        key_path: tuple[str, ...] = (),
    ) -> None:
        self.options.append(
            ServeOption(
                flag=flag,
                value=value,
                written=written,
                location=arg.source.location,
                conditional=arg.source.conditional,
                known=known,
                key_path=key_path,
            )
        )
        self.events.append(event)

    def _problem(self, message: str, flag: str | None, source: SourceToken) -> None:
        self.problems.append(ParseProblem(message=message, flag=flag, location=source.location))

    def _result(self) -> ServeConfig:
        # argparse keeps the last occurrence; one inside ${VAR:+...} replaces earlier ones
        # only sometimes, so only unconditional occurrences mark earlier ones overridden.
        final_event: dict[str, int] = {}
        for option, event in zip(self.options, self.events, strict=True):
            if not option.conditional:
                final_event[option.flag] = max(final_event.get(option.flag, 0), event)
        options = tuple(
            msgspec.structs.replace(option, overridden=event < final_event.get(option.flag, 0))
            for option, event in zip(self.options, self.events, strict=True)
        )
        json_flags = self.table.json_flags
        effective: dict[str, tuple[int, dict[str, Any]]] = {}
        for option, event in zip(options, self.events, strict=True):
            whole = option.flag in json_flags and not option.overridden and not option.key_path
            if whole and isinstance(option.value, dict):
                effective[option.flag] = (event, option.value)
        for flag, (event, value) in self.json_groups.items():
            if event >= final_event.get(flag, 0) and event > effective.get(flag, (0, {}))[0]:
                effective[flag] = (event, value)
        json_values = {flag: value for flag, (_, value) in effective.items()}
        model = self.model
        model_option = next((o for o in reversed(options) if o.flag == "--model"), None)
        if model is None and model_option is not None and isinstance(model_option.value, str):
            model = model_option.value
        env = {assignment.name: assignment for assignment in self.invocation.env}
        return ServeConfig(
            invocation=self.invocation,
            vllm_version=self.facts.version,
            model=model,
            options=options,
            json_values=json_values,
            env=env,
            problems=tuple(self.problems),
        )


def _has_non_finite(value: object) -> bool:
    """Whether a parsed JSON value holds a NaN or infinite float anywhere."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return True
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def _dotted_value(text: str) -> Any:
    """A dotted key's value: JSON if it parses, else a human-readable int, else the text."""
    try:
        return loads_json(text, "a dotted key's value")
    except json.JSONDecodeError:
        pass
    match = _HUMAN_INT.fullmatch(text.strip())
    if match:
        number, suffix = match.groups()
        if suffix in _DECIMAL:
            try:  # bounded first: a 400-digit number times 1e3 is no int64 vLLM takes
                scale = _DECIMAL[suffix]
                bounded = parse_float(number, "a dotted key's value", high=MOST_INT / scale)
                return int(bounded * scale)
            except BadNumber:
                return text
        if number.isdigit():
            return int(number) * _BINARY[suffix]
    return text


def _nest(path: list[str], value: Any) -> dict[str, Any] | Any:
    nested: Any = value
    for key in reversed(path):
        nested = {key: nested}
    return nested


def _merge(original: dict[str, Any], update: Any) -> None:
    """vLLM's recursive update: dicts merge, lists concatenate, anything else replaces."""
    if not isinstance(update, dict):
        return
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(original.get(key), dict):
            _merge(original[key], value)
        elif isinstance(value, list) and isinstance(original.get(key), list):
            original[key] = original[key] + value
        else:
            original[key] = value
