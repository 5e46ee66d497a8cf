"""Run inside the suite's vLLM environment: which sample values vLLM's own serve parser
accepts for each numeric flag. Prints one JSON object {flag: {sample: accepted}}.

Only flags whose argparse ``type`` is one of vLLM's numeric parsers (``int``, ``float``,
the human-readable integer parsers, each possibly wrapped in ``optional_type``) are listed.
"""

from __future__ import annotations

import argparse
import json
import sys

from vllm.entrypoints.launchers.cli_args import make_arg_parser
from vllm.utils.argparse_utils import FlexibleArgumentParser

NUMERIC = {"int", "float", "human_readable_int", "human_readable_int_or_auto"}


def _parser_name(convert: object) -> str | None:
    name = getattr(convert, "__name__", "")
    if name in NUMERIC:
        return name
    cells = getattr(convert, "__closure__", None) or ()
    for cell in cells:  # optional_type(X) and parse_type(X) keep X in a closure cell
        inner = _parser_name(cell.cell_contents)
        if inner:
            return inner
    return None


def main() -> int:
    samples = json.loads(sys.argv[1])
    parser = make_arg_parser(FlexibleArgumentParser())
    verdicts: dict[str, dict[str, bool]] = {}
    for action in parser._actions:
        longs = [s for s in action.option_strings if s.startswith("--")]
        if not longs or action.type is None or _parser_name(action.type) is None:
            continue
        accepted: dict[str, bool] = {}
        for sample in samples:
            try:
                action.type(sample)  # type: ignore[misc,operator]
            except (ValueError, TypeError, argparse.ArgumentTypeError):
                accepted[sample] = False
            else:
                accepted[sample] = True
        verdicts[longs[0]] = accepted
    print(json.dumps(verdicts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
