"""The one registry of input readers: kind -> detector + reader.

Detection (:func:`detect_kind`), the ``--input-format`` choices, the files a directory
walk looks at (:func:`is_candidate`) and the docs (:func:`describe`) all come from
``READERS``. Adding an input kind is one reader module plus one entry here.

Readers are pure: text and a :class:`ReadSource` in, invocations out. Their modules
(and PyYAML) are imported only when a file of their kind is read.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from importlib import import_module

from kvtool.audit.inputs import detect
from kvtool.audit.inputs.source import ReadSource
from kvtool.audit.model import InputKind, Invocation

Detector = Callable[[str, str], bool]


@dataclass(frozen=True)
class InputReader:
    kind: InputKind
    summary: str  # one line for `--help` and the docs
    detect: Detector  # (text, lower-cased base name) -> is it this kind?
    module: str  # kvtool.audit.inputs.<module> holds ``read(text, source)``
    suffixes: tuple[str, ...] = ()  # names a directory walk looks at for this kind
    # A cheap test the text must pass for the reader to find anything (None: no such
    # test); a file of this kind that fails it is skipped without being read.
    prefilter: Callable[[str], bool] | None = None

    def read(self, text: str, source: ReadSource) -> list[Invocation]:
        if not self.may_find(text):
            return []
        return _reader_function(self.module)(text, source)

    def may_find(self, text: str) -> bool:
        return self.prefilter is None or self.prefilter(text)


@cache
def _reader_function(module: str) -> Callable[[str, ReadSource], list[Invocation]]:
    """A reader module's ``read``, imported once (a directory walk reads thousands)."""
    reader: Callable[[str, ReadSource], list[Invocation]] = import_module(
        f"kvtool.audit.inputs.{module}"
    ).read
    return reader


_DOCUMENTS = (*detect.YAML_SUFFIXES, ".json")

# Tried in this order; the first whose detector accepts a file reads it.
READERS: tuple[InputReader, ...] = (
    InputReader(
        "shell",
        "shell scripts: vllm serve, python -m vllm..., python -m dynamo.vllm or "
        "huggingfaceserver, docker/podman run IMAGE, sh -c, heredocs",
        detect.is_shell,
        "shell",
        detect.SHELL_SUFFIXES,
        detect.may_start_vllm,
    ),
    InputReader(
        "dockerfile",
        "Dockerfile/Containerfile ENTRYPOINT and CMD (exec and shell forms)",
        detect.is_dockerfile,
        "dockerfile",
        (".dockerfile", ".containerfile"),  # and the names of detect.is_dockerfile_name
    ),
    InputReader(
        "github-actions",
        "GitHub Actions workflows: run: steps (vllm serve, python -m vllm..., docker run), env:",
        detect.is_github_workflow,
        "github_actions",
        _DOCUMENTS,
        detect.may_start_vllm,
    ),
    InputReader(
        "kaito",
        "KAITO inference ConfigMaps (inference_config.yaml with a vllm: section)",
        detect.is_kaito,
        "kaito",
        _DOCUMENTS,
    ),
    InputReader(
        "helm-values",
        "Helm values of production-stack (servingEngineSpec.modelSpec[]) and vLLM's chart",
        detect.is_helm_values,
        "helm_values",
        _DOCUMENTS,
    ),
    InputReader(
        "kubernetes",
        "Kubernetes objects of any kind: every container of every PodSpec, custom resources "
        "too; KServe's Hugging Face runtime args; Ray Serve apps; kustomize patches (JSON "
        "6902 ones applied to the base they target); NVIDIA Dynamo DynamoGraphDeployment "
        "workers (mainContainer, python3 -m dynamo.vllm); preset-only KAITO Workspaces and "
        "InferenceSets as the command KAITO's controller generates for the preset (with the "
        "vllm: section of the inference ConfigMap they name), or skipped with their reason "
        "when kvtool's table of KAITO presets does not know the preset",
        lambda text, name: detect.is_json_manifest(text, name) or detect.is_kubernetes(text, name),
        "kubernetes",
        _DOCUMENTS,
    ),
    InputReader(
        "compose",
        "docker compose services: entrypoint + command, environment, image",
        detect.is_compose,
        "compose",
        _DOCUMENTS,
    ),
    InputReader(
        "skypilot",
        "SkyPilot task YAML: the run: script, with envs:",
        detect.is_skypilot,
        "skypilot",
        _DOCUMENTS,
    ),
    InputReader(
        "vllm-config",
        "vLLM --config YAML (most top-level keys are vLLM flags)",
        detect.is_vllm_config,
        "vllm_config",
        _DOCUMENTS,
    ),
)

_BY_KIND: dict[str, InputReader] = {reader.kind: reader for reader in READERS}
FILE_FORMATS: tuple[str, ...] = tuple(_BY_KIND)


def reader_for(kind: str) -> InputReader | None:
    return _BY_KIND.get(kind)


def detect_kind(text: str, name: str) -> InputKind | None:
    """The kind of a file's content, or None when no reader takes it.

    A text naming ``vllm serve`` that fits no YAML kind and is not named as YAML is a
    script (a ``run`` file without a suffix or shebang).
    """
    lowered = name.lower()
    for reader in READERS:
        if reader.detect(text, lowered):
            return reader.kind
    if detect.is_script_text(text, lowered):
        return "shell"
    return None


def is_candidate(name: str) -> bool:
    """Whether a directory walk reads a file of this name (others are not looked at)."""
    lowered = name.lower()
    return lowered.endswith(_SUFFIXES) or detect.is_dockerfile_name(lowered)


# Every reader's name suffixes as one tuple, for str.endswith.
_SUFFIXES = tuple({suffix for reader in READERS for suffix in reader.suffixes})


def describe() -> str:
    """The input kinds as Markdown (docs/audit-inputs.md): what each reads, in detection order."""
    rows = "".join(f"| `{reader.kind}` | {reader.summary} |\n" for reader in READERS)
    return (
        "# kvtool audit inputs\n\n"
        "Generated from `kvtool/audit/inputs/registry.py` by `scripts/gen_rule_docs.py`.\n"
        "Each file's kind is detected from its content, trying the kinds in this order\n"
        "(`--input-format KIND` forces one); a directory is walked for files of these\n"
        "kinds, `.gitignore` respected. A file that starts no vLLM server, a chart\n"
        "template or an unreadable file is listed as skipped in the report.\n\n"
        "| kind | reads |\n|---|---|\n" + rows
    )
