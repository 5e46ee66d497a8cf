"""Cheap content tests several readers share: templates, whether a text can start vLLM.

Each test reads only the text (and a name) and imports no YAML parser, so a directory
walk can test thousands of files quickly. Which kind a file is, is declared with each
reader in :mod:`.registry`.
"""

from __future__ import annotations

import re
from functools import cache

KUSTOMIZATION_NAMES = ("kustomization.yaml", "kustomization.yml")
VLLM_COMMAND = re.compile(r"\bvllm\s+serve\b|vllm\.entrypoints\.(?:openai\.)?api_server\b")
# Go template actions as Helm charts write them; a `{{ var }}` inside a string value (a
# chat template) is not one.
_TEMPLATE_ACTION = re.compile(
    r"\{\{-?\s*(?:\.Values|\.Release|\.Chart|include\b|if\b|range\b|with\b|end\b|toYaml\b"
    r"|template\b|define\b|required\b|\$)"
)
_JINJA_BLOCK = re.compile(r"\{%-?\s*(?:if|for|set|macro|include)\b")


def is_justfile_name(name: str) -> bool:
    return name in ("justfile", ".justfile") or name.endswith(".just")


def is_template(text: str, name: str) -> bool:
    """A Helm chart template or a Jinja-templated file: not YAML until rendered."""
    if "{{" not in text and "{%" not in text:  # what both patterns below start with
        return False
    if is_helm_values_name(name):
        return False
    return bool(_TEMPLATE_ACTION.search(text) or _JINJA_BLOCK.search(text))


# values.yaml, values-pd.yaml, values_gpu.yml, ms-values.yaml, agentic-serving.values.yaml
_VALUES_NAME = re.compile(r"^(?:.*[._-])?values(?:[._-].*)?\.ya?ml$")


def is_helm_values_name(path: str) -> bool:
    """A file named as Helm values, outside a chart's ``templates/``: data, never a template.

    Helm renders only ``templates/``; a ``{{ .Values.x }}`` written in a values file is
    text the chart passes to ``tpl`` later
    (https://helm.sh/docs/howto/charts_tips_and_tricks/#using-the-tpl-function), and the
    file is still plain YAML, as llm-d-modelservice's examples/values-*.yaml write it.
    """
    parts = path.replace("\\", "/").split("/")
    return "templates" not in parts[:-1] and bool(_VALUES_NAME.match(parts[-1].lower()))


def may_start_vllm(text: str) -> bool:
    """False only when ``text`` cannot start a vLLM server: it names neither vLLM, KServe's
    ``huggingfaceserver`` nor an image of the image table (whose entrypoint may be vLLM's).
    Scripts and workflows that fail it are not worth lexing or parsing."""
    from kvtool.releases.images import image_names

    lowered = text.lower()
    return (
        "vllm" in lowered
        or "huggingfaceserver" in lowered  # KServe's server, which runs vLLM's engine
        or any(name in lowered for name in image_names())
    )


# A vLLM server start as shell-like words (the starts .command_line.find_serve knows)
# and as quoted list items ("vllm", "serve" / "-m", "vllm.entrypoints..."): what the
# generic finder (.finder) looks for in any text.
SERVER_LINE = re.compile(
    r"\bvllm\s+serve\b|\bvllm\.entrypoints\.(?:openai\.api_server|api_server|cli\.main)\b"
    r"|\b(?:docker|podman|nerdctl)\s+run\b"
)
SERVER_LIST = re.compile(
    r"""(["'])(?:[^"'\n]*/)?vllm\1\s*,\s*(["'])serve\2"""
    r"""|(["'])-m\3\s*,\s*(["'])vllm\.entrypoints\.(?:openai\.api_server|api_server|cli\.main)\4"""
)


def may_find_server(text: str) -> bool:
    """False when ``text`` holds no vLLM server start the generic finder recognises: a
    start, an argument list that may stand beside a vLLM image (``args = [...]``), or a
    key under which a mapping of vLLM flags may be written."""
    if "vllm" not in text:
        return False
    if SERVER_LINE.search(text) or SERVER_LIST.search(text) or "rgs" in text:
        return True
    return bool(_SETTINGS_KEY_LINE.search(text))


# A key naming vLLM or its engine (`vllm:`, `engine_args:`): a mapping of flags may follow.
_SETTINGS_KEY_LINE = re.compile(
    r"^[ \t]*[\"']?\w*(?:vllm|engine_?args|server_?args)\w*[\"']?[ \t]*:", re.I | re.M
)


def is_script_text(text: str, name: str) -> bool:
    """A plain-text file (no suffix, or .txt) that runs ``vllm serve``: a `run` file."""
    plain = "." not in name or name.endswith(".txt")
    return plain and bool(VLLM_COMMAND.search(text))


@cache
def known_flag_spellings() -> frozenset[str]:
    """Every ``vllm serve`` flag spelling of any tabled release (dashes, as argparse has it)."""
    from kvtool.releases import release_index

    return frozenset(spelling.replace("_", "-") for spelling in release_index().flags)
