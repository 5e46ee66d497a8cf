"""Cross-check the AST-derived flag lists against an independent text scan of the wheel
(shared/reference/version-gates.md §6 step 6: "compare against an independent regex pass").

The scan only sees literal ``add_argument("--x", ...)`` calls in the serve parser files
and the ``*FrontendArgs`` dataclass fields; the AST walker must find every one of those
and nothing else, except flags registered in loops the text scan cannot expand (the 0.11.x
deprecated guided-decoding flags, §6 "Flags added dynamically").
"""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

import pytest

from kvtool.releases import load_release
from tests.releases.wheelcache import release_wheel

_ADD_ARGUMENT = re.compile(r"add_argument\(\s*((?:[\"'][-][^\"']+[\"'],\s*)+)")
_OPTION = re.compile(r"[\"'](-[^\"']+)[\"']")
_FIELD = re.compile(r"^    ([a-z][a-z0-9_]*): [A-Za-z]", re.M)
_FRONTEND_CLASS = re.compile(r"\nclass (\w*FrontendArgs)\b.*?(?=\n(?:class|def|@) )", re.S)
_CLI_ARGS_IMPORT = re.compile(r"from (vllm\.entrypoints\.[\w.]*cli_args) import")
LOOP_REGISTERED = {
    "--guided-decoding-backend",
    "--guided-decoding-disable-fallback",
    "--guided-decoding-disable-any-whitespace",
    "--guided-decoding-disable-additional-properties",
}


def _text_scan(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as zf:
        serve = zf.read("vllm/entrypoints/cli/serve.py").decode()
        match = _CLI_ARGS_IMPORT.search(serve)
        assert match, "serve.py imports make_arg_parser from no cli_args module"
        cli_args = zf.read(match.group(1).replace(".", "/") + ".py").decode()
        engine = zf.read("vllm/engine/arg_utils.py").decode()
    found: set[str] = set()
    for text in (serve, cli_args, engine):
        for call in _ADD_ARGUMENT.finditer(text):
            found |= set(_OPTION.findall(call.group(1)))
    for cls in _FRONTEND_CLASS.finditer(cli_args):
        found |= {"--" + name.replace("_", "-") for name in _FIELD.findall(cls.group(0))}
    return found


@pytest.mark.network
@pytest.mark.timeout(600)
@pytest.mark.parametrize("version", ["0.10.2", "0.11.1", "0.22.1", "0.32.0", "0.33.0"])
def test_ast_flags_match_an_independent_text_scan(version: str) -> None:
    table = load_release(version)
    wheel = release_wheel(version)
    derived = {spelling for f in table.flags for spelling in (f.name, *f.aliases)}
    scanned = _text_scan(wheel)
    assert scanned - derived == set()
    assert derived - scanned <= LOOP_REGISTERED
