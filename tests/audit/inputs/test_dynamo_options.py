"""rules/dynamo/worker_options.json: NVIDIA Dynamo's own vLLM-worker options, generated
from its released wheels by scripts/gen_dynamo_options.py, and how the reader uses them."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
import textwrap

import pytest
from packaging.version import Version

from kvtool.audit.inputs.dynamo import engine_arguments, worker_options
from kvtool.resources import rules_dir
from tests.conftest import REPO_ROOT
from tests.releases.wheelcache import pypi_reachable

sys.path.insert(0, str(REPO_ROOT / "scripts"))

from gen_dynamo_options import options_in

GENERATOR = REPO_ROOT / "scripts" / "gen_dynamo_options.py"
TABLE = rules_dir() / "dynamo" / "worker_options.json"


def test_the_generator_reads_dynamos_helpers_and_plain_add_argument_calls() -> None:
    # The call shapes of ai-dynamo 1.6.1 dynamo/common/configuration/groups/runtime_args.py
    # and dynamo/vllm/backend_args.py (written here, not copied).
    source = textwrap.dedent(
        """
        def add_arguments(self, parser):
            parser.add_argument("--version", action="version", version="x")
            g = parser.add_argument_group("Dynamo vLLM Options")
            add_argument(g, flag_name="--endpoint-types", env_var="E", default="chat",
                         obsolete_flag="--dyn-endpoint-types", help="h")
            add_negatable_bool_argument(g, flag_name="--headless", env_var="H",
                                        default=False, help="h")
            add_argument(g, flag_name="--connector", env_var="C", default=[], help="h",
                         nargs="*")
            add_argument(g, flag_name="--dyn-structural-tag", env_var="S", default=None,
                         nargs="?", const="true", help="h")
            g.add_argument("--dyn-enable-structural-tag",
                           action=argparse.BooleanOptionalAction, default=None)
            parser.add_argument("--tensor-parallel-size", type=int)
        """
    )
    assert options_in(ast.parse(source)) == {
        "--version": "none",
        "--endpoint-types": "one",
        "--dyn-endpoint-types": "one",
        "--headless": "negatable",
        "--connector": "many",
        "--dyn-structural-tag": "optional",
        "--dyn-enable-structural-tag": "negatable",
        "--tensor-parallel-size": "one",
    }


def test_the_table_records_its_wheels_and_release_ranges() -> None:
    table = json.loads(TABLE.read_text())
    versions = [Version(w["version"]) for w in table["wheels"]]
    assert versions == sorted(versions) and versions
    for wheel in table["wheels"]:
        assert wheel["file"].startswith(f"ai_dynamo-{wheel['version']}-")
        assert re.fullmatch(r"[0-9a-f]{64}", wheel["sha256"])
    read = {str(v) for v in versions}
    for row in table["options"].values():
        assert {row["first"], row["last"]} <= read
        assert Version(row["first"]) <= Version(row["last"])


def test_dynamo_options_and_their_values_are_dropped_vllms_kept() -> None:
    options = worker_options()
    one = next(name for name, arity in options.items() if arity == "one")
    switch = next(name for name, arity in options.items() if arity == "negatable")
    many = next(name for name, arity in options.items() if arity == "many")
    words = [
        "--model", "m", one, "v", f"{one}=v", switch, "--no-" + switch[2:], many, "a", "b",
        "--max-model-len", "4096",
    ]  # fmt: skip
    assert [words[i] for i in engine_arguments(words, 0)] == [
        "--model", "m", "--max-model-len", "4096",
    ]  # fmt: skip


@pytest.mark.network
@pytest.mark.timeout(300)
def test_the_table_re_derives_from_its_wheels() -> None:
    cache = REPO_ROOT / ".cache" / "dynamo"
    wheels = json.loads(TABLE.read_text())["wheels"]
    cached = all((cache / w["file"]).is_file() for w in wheels)
    if not cached and not pypi_reachable():
        pytest.skip("the Dynamo wheels are not cached and pypi.org:443 is unreachable")
    proc = subprocess.run(
        [sys.executable, str(GENERATOR), "--check"], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
