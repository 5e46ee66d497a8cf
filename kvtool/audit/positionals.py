"""The words after ``kvtool audit`` / ``kvtool upgrade``: paths, ``-`` for stdin, then an
optional vLLM command (``-- vllm serve MODEL ...``), shared by both commands."""

from __future__ import annotations

from pathlib import Path

VLLM_HEADS = ("vllm", "serve")


def split_positionals(words: list[str]) -> tuple[list[str], list[str]]:
    """Split ``[PATHS]... [ARGV]`` (typer folds the words after ``--`` into the same list).

    ARGV starts at the first word that is not an existing path and begins a vLLM command
    (``vllm serve``, ``python -m vllm...``, ``X=1 vllm ...``, ``serve ...``).
    """
    from kvtool.audit.inputs.command_line import find_serve

    for index, word in enumerate(words):
        rest = words[index:]
        if rest[:2] == ["vllm", "serve"]:
            return words[:index], rest  # even where a folder named vllm exists (a vLLM checkout)
        if Path(word).exists():
            continue
        if word in VLLM_HEADS or find_serve(rest) is not None:
            return words[:index], rest
    return words, []


STDIN = "-"
