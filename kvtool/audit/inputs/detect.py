"""Cheap content tests, one per input kind: which reader a file needs (the name breaks ties).

Each test reads only the text and the file's lower-cased base name and imports no YAML
parser, so a directory walk can test thousands of files quickly. The order in which
they are tried, and what each kind's reader is, lives in :mod:`.registry`.
"""

from __future__ import annotations

import re
from functools import cache

# .sbatch/.slurm/.pbs: batch-scheduler job scripts (#SBATCH lines are comments to sh).
SHELL_SUFFIXES = (".sh", ".bash", ".zsh", ".env", ".cmd", ".sbatch", ".slurm", ".pbs")
YAML_SUFFIXES = (".yaml", ".yml")
KUSTOMIZATION_NAMES = ("kustomization.yaml", "kustomization.yml")
VLLM_COMMAND = re.compile(r"\bvllm\s+serve\b|vllm\.entrypoints\.(?:openai\.)?api_server\b")

_K8S_HEAD = re.compile(r"^apiVersion:\s*\S", re.MULTILINE)
_K8S_KIND = re.compile(r"^kind:\s*([A-Za-z]+)", re.MULTILINE)
_JSON_MANIFEST = re.compile(r"\s*\{\s*\"(apiVersion|kind|items)\"")
# A `containers:`/`initContainers:` key anywhere: a PodSpec inside any object, or the
# container lists of a Helm values file (llm-d's decode/prefill, KServe's predictor).
_CONTAINERS_KEY = re.compile(r"^[ \t-]*(init)?[cC]ontainers:", re.MULTILINE)
_COMPOSE = re.compile(r"^services:\s*$", re.MULTILINE)
# SkyPilot task YAML: a top-level `run:` script next to the task's other sections
# (https://docs.skypilot.co/en/latest/reference/yaml-spec.html).
_SKYPILOT_RUN = re.compile(r"^run:", re.MULTILINE)
_SKYPILOT_SECTION = re.compile(r"^(resources|setup|num_nodes|envs|file_mounts|service):", re.M)
# Helm values of the charts kvtool maps (see .helm_values): production-stack and vLLM's own.
_HELM_VALUES = re.compile(r"^servingEngineSpec:|^image:\s*\n(?:[ \t]+.*\n)*?[ \t]+command:", re.M)
# Go template actions as Helm charts write them; a `{{ var }}` inside a string value (a
# chat template) is not one.
_TEMPLATE_ACTION = re.compile(
    r"\{\{-?\s*(?:\.Values|\.Release|\.Chart|include\b|if\b|range\b|with\b|end\b|toYaml\b"
    r"|template\b|define\b|required\b|\$)"
)
_JINJA_BLOCK = re.compile(r"\{%-?\s*(?:if|for|set|macro|include)\b")
_TOP_LEVEL_KEY = re.compile(r"^([A-Za-z_][A-Za-z0-9_.-]*):(?:\s|$)", re.MULTILINE)
_DOCKERFILE_INSTRUCTION = re.compile(r"^[ \t]*FROM[ \t]+\S", re.MULTILINE | re.IGNORECASE)


def is_shell(text: str, name: str) -> bool:
    return text.startswith("#!") or name.endswith(SHELL_SUFFIXES)


def is_dockerfile_name(name: str) -> bool:
    """``Dockerfile``, ``Containerfile``, ``x.dockerfile`` or a variant ``Dockerfile.cuda``
    (not ``dockerfile.py``: a variant suffix that names another language is that language)."""
    if name in ("dockerfile", "containerfile") or name.endswith((".dockerfile", ".containerfile")):
        return True
    head, dot, variant = name.partition(".")
    return head in ("dockerfile", "containerfile") and bool(dot) and variant not in _NOT_VARIANTS


# Suffixes after "dockerfile." that are other kinds of file (code, docs, templates).
_NOT_VARIANTS = frozenset(
    {"py", "md", "txt", "rst", "json", "yaml", "yml", "sh", "go", "rs", "j2", "jinja", "tpl",
     "tmpl", "in", "toml", "lock", "bak", "orig"}
)  # fmt: skip


def is_dockerfile(text: str, name: str) -> bool:
    return is_dockerfile_name(name) and bool(_DOCKERFILE_INSTRUCTION.search(text))


def is_makefile_name(name: str) -> bool:
    return name in ("makefile", "gnumakefile") or name.endswith(".mk")


def is_justfile_name(name: str) -> bool:
    return name in ("justfile", ".justfile") or name.endswith(".just")


def is_python(text: str, name: str) -> bool:
    return name.endswith(".py") or (text.startswith("#!") and "python" in text[: text.find("\n")])


def is_notebook(text: str, name: str) -> bool:
    return name.endswith(".ipynb")


def is_make(text: str, name: str) -> bool:
    return is_makefile_name(name) or is_justfile_name(name)


def is_systemd_unit(text: str, name: str) -> bool:
    return name.endswith(".service") or ("[Service]" in text and "ExecStart" in text)


def is_nomad_job(text: str, name: str) -> bool:
    if name.endswith((".nomad", ".nomad.hcl")):
        return True
    return name.endswith(".hcl") and "task" in text and "job" in text


_CLOUD_CONFIG = re.compile(r"\s*#cloud-config\b")


def is_cloud_config(text: str, name: str) -> bool:
    return bool(_CLOUD_CONFIG.match(text))


# dstack: `type: service|task|dev-environment` with `commands:`
# (https://dstack.ai/docs/reference/dstack.yml/service/), or a .dstack.yml name.
_DSTACK_TYPE = re.compile(r"^type:\s*['\"]?(?:service|task|dev-environment)\b", re.MULTILINE)
_DSTACK_COMMANDS = re.compile(r"^commands:", re.MULTILINE)


def is_dstack(text: str, name: str) -> bool:
    if name.endswith((".dstack.yml", ".dstack.yaml")):
        return True
    return bool(_DSTACK_TYPE.search(text) and _DSTACK_COMMANDS.search(text))


def is_json_manifest(text: str, name: str) -> bool:
    return bool(_JSON_MANIFEST.match(text)) and '"apiVersion"' in text


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


def is_kaito(text: str, name: str) -> bool:
    if not _K8S_HEAD.search(text) or set(_K8S_KIND.findall(text)) != {"ConfigMap"}:
        return False
    from kvtool.audit.inputs.kaito import is_inference_config

    return is_inference_config("\n".join(line.strip() for line in text.splitlines()))


def is_kubernetes(text: str, name: str) -> bool:
    if _K8S_HEAD.search(text) and _K8S_KIND.search(text):
        return True
    if name in KUSTOMIZATION_NAMES:
        return True  # apiVersion and kind are optional in a kustomization file
    return not name.endswith(".json") and bool(_CONTAINERS_KEY.search(text))


def is_compose(text: str, name: str) -> bool:
    return bool(_COMPOSE.search(text)) or ("compose" in name and name.endswith(YAML_SUFFIXES))


def is_skypilot(text: str, name: str) -> bool:
    return bool(_SKYPILOT_RUN.search(text) and _SKYPILOT_SECTION.search(text))


# A GitHub Actions workflow: top-level `jobs:` and its trigger, `on:` (which YAML 1.1
# readers may see as `true:`, so some files quote it).
_WORKFLOW_JOBS = re.compile(r"^jobs:\s*$", re.MULTILINE)
_WORKFLOW_ON = re.compile(r"^(?:on|\"on\"|'on'|true):", re.MULTILINE)


# A composite action: action.yml's top-level `runs:` with `using: composite`.
_COMPOSITE = re.compile(r"^runs:\s*\n(?:[ \t]+.*\n)*?[ \t]+using:\s*['\"]?composite", re.M)


def is_github_workflow(text: str, name: str) -> bool:
    if _WORKFLOW_JOBS.search(text) and _WORKFLOW_ON.search(text):
        return True
    return "composite" in text and bool(_COMPOSITE.search(text))


def is_helm_values(text: str, name: str) -> bool:
    return bool(_HELM_VALUES.search(text))


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


# A YAML mapping is read as a vLLM --config file when at least this share of its
# top-level keys are vLLM flags: real config files are all flags, and one or two
# misspelt or removed ones must still be reported; Helm values and CI files have few.
CONFIG_FLAG_SHARE = 0.5


def is_vllm_config(text: str, name: str) -> bool:
    keys = _TOP_LEVEL_KEY.findall(text)
    if not keys:
        return False
    flags = known_flag_spellings()
    hits = sum(1 for key in keys if "--" + key.replace("_", "-") in flags)
    return hits > 0 and hits >= CONFIG_FLAG_SHARE * len(keys)


@cache
def known_flag_spellings() -> frozenset[str]:
    """Every ``vllm serve`` flag spelling of any tabled release (dashes, as argparse has it)."""
    from kvtool.releases import release_index

    return frozenset(spelling.replace("_", "-") for spelling in release_index().flags)
