"""``--target shell``: one bash script that starts every process of the plan.

A plan with one engine and no sidecar ``exec``s the engine, so the script's PID is
the server's and a signal stops it directly. Otherwise every process runs in the
background, sidecars are waited for over HTTP before the engines start, and a trap
stops them all when the script exits or any one of them dies.
"""

from __future__ import annotations

import shlex

from kvtool.launch.plan import LaunchPlan, Process
from kvtool.launch.targets.header import header_lines
from kvtool.launch.targets.names import check_env_name, comment_text

SCRIPT_NAME = "launch.sh"
READY_TIMEOUT_S = 300


def command_lines(words: tuple[str, ...], head: int, prefix: str = "") -> list[str]:
    """``words`` quoted: the first ``head`` words on one line, then one option (with
    its value) per continued line."""
    quoted = [shlex.quote(w) for w in words]
    lines = [prefix + " ".join(quoted[:head])]
    index = head
    while index < len(words):
        line = "    " + quoted[index]
        if (
            words[index].startswith("-")
            and index + 1 < len(words)
            and not words[index + 1].startswith("--")
        ):
            line += " " + quoted[index + 1]
            index += 1
        lines.append(line)
        index += 1
    return [line + " \\" for line in lines[:-1]] + [lines[-1]]


def _head(process: Process) -> int:
    """The program, its sub-command and (for an engine) the model stay on the first line."""
    if process.kind != "vllm":
        return len(process.command)
    return len(process.command) + (2 if process.args[:1] == ("--model",) else 1)


def _env_prefix(process: Process) -> str:
    env = list(process.env)
    if process.cuda_devices is not None:
        env.insert(0, ("CUDA_VISIBLE_DEVICES", process.cuda_devices))
    return "".join(f"{check_env_name(key, 'env')}={shlex.quote(value)} " for key, value in env)


def _header(plan: LaunchPlan) -> list[str]:
    header = header_lines(plan, "shell", "run it again to change this setup.")
    return ["#!/usr/bin/env bash", *header, "set -euo pipefail", ""]


def _single(plan: LaunchPlan, engine: Process) -> list[str]:
    lines = [
        f"export {check_env_name(key, 'env')}={shlex.quote(value)}" for key, value in engine.env
    ]
    return [*lines, *command_lines(engine.argv, _head(engine), prefix="exec ")]


def _supervised(plan: LaunchPlan) -> list[str]:
    lines = [
        "pids=()",
        "trap 'kill \"${pids[@]}\" 2>/dev/null || true' EXIT",
        "trap 'exit 130' INT",
        "trap 'exit 143' TERM",
        "wait_ready() {  # URL: poll until it answers or the timeout passes",
        f"    for _ in $(seq {READY_TIMEOUT_S}); do",
        "        python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], "
        'timeout=2)\' "$1" 2>/dev/null && return 0',
        "        sleep 1",
        "    done",
        '    echo "launch.sh: $1 did not answer" >&2',
        "    return 1",
        "}",
        "",
    ]
    for process in (*plan.sidecars, *plan.engines):
        lines.append(f"# {comment_text(process.name)}")
        body = command_lines(process.argv, _head(process), prefix=_env_prefix(process))
        body[-1] += " &"
        lines += [*body, "pids+=($!)"]
        if process.kind != "vllm":
            lines.append(f"wait_ready http://127.0.0.1:{process.port}{process.health_path}")
        lines.append("")
    lines += ["# Stop everything as soon as one process exits.", "wait -n", "exit $?"]
    return lines


def render(plan: LaunchPlan) -> dict[str, str]:
    engines = plan.engines
    if len(plan.processes) == 1 and engines and engines[0].cuda_devices is None:
        body = _single(plan, engines[0])
    else:
        body = _supervised(plan)
    return {SCRIPT_NAME: "\n".join([*_header(plan), *body]) + "\n"}
