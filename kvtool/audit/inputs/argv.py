"""argv given on kvtool's own command line: ``kvtool audit -- vllm serve MODEL ...``."""

from __future__ import annotations

from kvtool.audit.inputs.command_line import find_serve, serve_arguments
from kvtool.audit.inputs.docker_resources import docker_run_resources
from kvtool.audit.inputs.registry import ARGV
from kvtool.audit.inputs.vllm_config import referenced_config
from kvtool.audit.model import EnvAssignment, Invocation, SourceToken
from kvtool.errors import KvtoolError


def read_argv(argv: list[str]) -> Invocation:
    """One invocation from argv words; tokens carry their argv ``index`` (argv has no lines).

    Accepts the whole command (``vllm serve M ...``, ``python -m
    vllm.entrypoints.openai.api_server ...``, ``X=1 vllm serve ...``), ``serve M ...``,
    or only the serve arguments (``M --tensor-parallel-size 4``).
    """
    if not argv:
        raise KvtoolError("audit: no vLLM command given after '--' (e.g. -- vllm serve MODEL)")
    match = find_serve(argv)
    env: list[EnvAssignment] = []
    image: str | None = None
    if match is not None and match.kind != "shell":
        served = set(serve_arguments(argv, match))
        image = match.image
        for position in sorted(match.env):
            name, _, value = match.env[position].partition("=")
            env.append(EnvAssignment(name=name, value=value))
    elif match is not None:
        raise KvtoolError(
            "audit: argv runs a shell script (sh -c); save the script to a file and audit the file"
        )
    else:
        start = 1 if argv[0] == "serve" else 0
        served = set(range(start, len(argv)))
    tokens = tuple(
        SourceToken(text=word, index=position)
        for position, word in enumerate(argv)
        if position in served
    )
    items, notes = referenced_config(tokens, None)
    sizing_notes: list[str] = []
    resources = (
        docker_run_resources(match, argv, lambda _: None, sizing_notes)
        if match is not None
        else None
    )
    return Invocation(
        kind=ARGV,
        label="<argv>",
        tokens=tokens,
        env=tuple(env),
        image=image,
        config_items=items,
        notes=notes + tuple(sizing_notes),
        resources=resources,
    )
