"""The one registry of input readers: kind -> how a file is recognised + its reader.

Detection (:func:`detect_kind`), the ``--input-format`` choices and their help
(:data:`FILE_FORMATS`, :func:`format_choices`), the files never opened
(:func:`never_read`) and the docs (:func:`describe`) all come from ``READERS``.
Adding an input kind is one reader module plus one entry here: the entry says, as
data (:class:`Claim` patterns), which files are of its kind, so the reader is chosen
before any reader module is imported. A file no reader takes, or whose reader finds
nothing, is searched by the generic finder (:mod:`.finder`, kind ``generic``).

Readers are pure: text and a :class:`ReadSource` in, invocations out. Their modules
(and PyYAML) are imported only when a file of their kind is read.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from importlib import import_module

from kvtool.audit.inputs import detect
from kvtool.audit.inputs.source import ReadSource
from kvtool.audit.model import InputKind, Invocation


@dataclass(frozen=True)
class Claim:
    """One way a file shows it is of a kind; every part given must hold.

    ``name`` is searched in the file's lower-cased base name, each of ``text`` in its
    content (``re.MULTILINE``); ``confirm`` names a ``module:function`` of
    ``kvtool.audit.inputs`` taking the text, asked only once the patterns hold, for a
    test that needs the reader's own knowledge (its module is imported then, not before).
    """

    name: str | None = None
    text: tuple[str, ...] = ()
    confirm: str | None = None

    def holds(self, text: str, name: str) -> bool:
        if self.name is not None and _pattern(self.name).search(name) is None:
            return False
        if not all(_pattern(p, re.MULTILINE).search(text) for p in self.text):
            return False
        return self.confirm is None or _confirmer(self.confirm)(text)


@cache
def _pattern(source: str, flags: int = 0) -> re.Pattern[str]:
    """Compiled on first use: a run compiles only the patterns its files reach."""
    return re.compile(source, flags)


@cache
def _confirmer(target: str) -> Callable[[str], bool]:
    module, _, function = target.partition(":")
    test: Callable[[str], bool] = getattr(import_module(f"kvtool.audit.inputs.{module}"), function)
    return test


@dataclass(frozen=True)
class InputReader:
    kind: InputKind
    summary: str  # one line for `--help` and the docs
    detect: tuple[Claim, ...]  # the file is of this kind when any claim holds
    module: str  # kvtool.audit.inputs.<module> holds ``read(text, source)``
    suffixes: tuple[str, ...] = ()  # names a directory walk looks at for this kind
    # A cheap test the text must pass for the reader to find anything (None: no such
    # test); a file of this kind that fails it is skipped without being read.
    prefilter: Callable[[str], bool] | None = None
    # True when the reader sees every place its form can start a command (Python's own
    # parser, make's recipes): where it finds nothing, the generic finder is not asked
    # (it would take a docstring's or message's `vllm serve` for a start).
    exhaustive: bool = False
    # Base names (a pattern searched in the lower-cased name) that are this kind's
    # whatever the text says, beside ``suffixes``: a walk counts them as deployment files.
    names: str | None = None

    def read(self, text: str, source: ReadSource) -> list[Invocation]:
        if not self.may_find(text):
            return []
        return _reader_function(self.module)(text, source)

    def may_find(self, text: str) -> bool:
        return self.prefilter is None or self.prefilter(text)

    def claims(self, text: str, name: str) -> bool:
        """Whether ``text`` named ``name`` (lower-cased base name) is of this kind."""
        return any(claim.holds(text, name) for claim in self.detect)


@cache
def _reader_function(module: str) -> Callable[[str, ReadSource], list[Invocation]]:
    """A reader module's ``read``, imported once (a directory walk reads thousands)."""
    reader: Callable[[str, ReadSource], list[Invocation]] = import_module(
        f"kvtool.audit.inputs.{module}"
    ).read
    return reader


def _ends(suffixes: tuple[str, ...]) -> str:
    """A name pattern: ends with one of ``suffixes``."""
    return "(?:" + "|".join(re.escape(suffix) for suffix in suffixes) + ")$"


_DOCUMENTS = (".yaml", ".yml", ".json")
# .sbatch/.slurm/.pbs: batch-scheduler job scripts (#SBATCH lines are comments to sh).
_SHELL_SUFFIXES = (".sh", ".bash", ".zsh", ".env", ".cmd", ".sbatch", ".slurm", ".pbs")
# A Kubernetes object's head, as kubectl writes it.
_K8S_HEAD = r"^apiVersion:\s*\S"
_K8S_KIND = r"^kind:\s*[A-Za-z]"
# Dockerfile, Containerfile, x.dockerfile, or a variant Dockerfile.cuda (not
# dockerfile.py: a variant suffix that names another language is that language).
_DOCKERFILE_NAMES = (
    r"^(?:docker|container)file$|\.(?:docker|container)file$|^(?:docker|container)file\."
    r"(?!(?:py|md|txt|rst|json|yaml|yml|sh|go|rs|j2|jinja|tpl|tmpl|in|toml|lock|bak|orig)$)"
)
_MAKE_NAMES = r"^(?:makefile|gnumakefile|justfile|\.justfile)$|\.(?:mk|just)$"

# Tried in this order; the first whose claims accept a file reads it.
READERS: tuple[InputReader, ...] = (
    InputReader(
        "notebook",
        "Jupyter notebooks: code cells' `!` shell lines, %%bash cells and Python "
        "(read as one program, in order), with %env; outputs are not read",
        (Claim(name=r"\.ipynb$"),),
        "notebook",
        (".ipynb",),
        detect.may_start_vllm,
        exhaustive=True,
    ),
    InputReader(
        "python",
        'Python launchers: literal argv lists (`["vllm", "serve", ...]`, '
        "`python -m vllm.entrypoints...`) and command strings, with the env they set "
        "(os.environ, env= dicts, Modal's .env); computed values are runtime values",
        (Claim(name=r"\.py$"), Claim(text=(r"\A#![^\n]*python",))),
        "python_launcher",
        (".py",),
        detect.may_start_vllm,
        exhaustive=True,
    ),
    InputReader(
        "makefile",
        "Makefile and justfile recipes (make's line joining, $(VAR) and {{var}} values)",
        (Claim(name=_MAKE_NAMES),),
        "make_recipes",
        (".mk", ".just"),
        detect.may_start_vllm,
        exhaustive=True,
        names=_MAKE_NAMES,
    ),
    InputReader(
        "systemd",
        "systemd units: ExecStart= with Environment= (EnvironmentFile= noted)",
        (Claim(name=r"\.service$"), Claim(text=(r"\[Service\]", "ExecStart"))),
        "systemd",
        (".service",),
        detect.may_start_vllm,
    ),
    InputReader(
        "nomad",
        "Nomad job files (HCL): each task's command, args, image and env block",
        (Claim(name=r"\.nomad(?:\.hcl)?$"), Claim(name=r"\.hcl$", text=("task", "job"))),
        "nomad",
        (".nomad", ".hcl"),
        detect.may_start_vllm,
    ),
    InputReader(
        "cloud-init",
        "cloud-init user data: runcmd/bootcmd (strings and argv lists), write_files scripts",
        (Claim(text=(r"\A\s*#cloud-config\b",)),),
        "cloud_init",
        (),
        detect.may_start_vllm,
    ),
    InputReader(
        "shell",
        "shell scripts: vllm serve, python -m vllm..., python -m dynamo.vllm or "
        "huggingfaceserver, docker/podman run IMAGE, sh -c, heredocs",
        (Claim(text=(r"\A#!",)), Claim(name=_ends(_SHELL_SUFFIXES))),
        "shell",
        _SHELL_SUFFIXES,
        detect.may_start_vllm,
    ),
    InputReader(
        "dockerfile",
        "Dockerfile/Containerfile ENTRYPOINT and CMD (exec and shell forms)",
        (Claim(name=_DOCKERFILE_NAMES, text=(r"^[ \t]*(?i:FROM)[ \t]+\S",)),),
        "dockerfile",
        (".dockerfile", ".containerfile"),
        names=_DOCKERFILE_NAMES,
    ),
    InputReader(
        "github-actions",
        "GitHub Actions workflows and composite actions (action.yml runs.steps): run: "
        "steps (vllm serve, python -m vllm..., docker run), env:",
        (
            # top-level `jobs:` and its trigger `on:` (which YAML 1.1 reads as `true:`,
            # so some files quote it)
            Claim(text=(r"^jobs:\s*$", r"^(?:on|\"on\"|'on'|true):")),
            # a composite action: action.yml's `runs:` with `using: composite`
            Claim(text=(r"^runs:\s*\n(?:[ \t]+.*\n)*?[ \t]+using:\s*['\"]?composite",)),
        ),
        "github_actions",
        _DOCUMENTS,
        detect.may_start_vllm,
    ),
    InputReader(
        "dstack",
        "dstack run configurations (.dstack.yml): commands: with env: and image:",
        (
            # https://dstack.ai/docs/reference/dstack.yml/service/
            Claim(name=r"\.dstack\.ya?ml$"),
            Claim(text=(r"^type:\s*['\"]?(?:service|task|dev-environment)\b", "^commands:")),
        ),
        "dstack",
        _DOCUMENTS,
        detect.may_start_vllm,
    ),
    InputReader(
        "kaito",
        "KAITO inference ConfigMaps (inference_config.yaml with a vllm: section)",
        (
            # only ConfigMaps, one holding a YAML value with a top-level vllm: key
            Claim(
                text=(
                    _K8S_HEAD,
                    r"^kind:\s*ConfigMap(?![A-Za-z])",
                    r"\A(?![\s\S]*^kind:\s*(?!ConfigMap(?![A-Za-z]))[A-Za-z])",
                    r"^\s*vllm:",
                )
            ),
        ),
        "kaito",
        _DOCUMENTS,
    ),
    InputReader(
        "helm-values",
        "Helm values of production-stack (servingEngineSpec.modelSpec[]) and vLLM's chart",
        # the charts kvtool maps (see .helm_values): production-stack's and vLLM's own
        (Claim(text=(r"^servingEngineSpec:|^image:\s*\n(?:[ \t]+.*\n)*?[ \t]+command:",)),),
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
        (
            Claim(text=(r'\A\s*\{\s*"(?:apiVersion|kind|items)"', '"apiVersion"')),
            Claim(text=(_K8S_HEAD, _K8S_KIND)),
            # apiVersion and kind are optional in a kustomization file
            Claim(name=f"^{_ends(detect.KUSTOMIZATION_NAMES)}"),
            # a PodSpec inside any object, or the container lists of a Helm values file
            # (llm-d's decode/prefill, KServe's predictor)
            Claim(name=r"^(?!.*\.json$)", text=(r"^[ \t-]*(?:init)?[cC]ontainers:",)),
        ),
        "kubernetes",
        _DOCUMENTS,
    ),
    InputReader(
        "compose",
        "docker compose services: entrypoint + command, environment, image",
        (Claim(text=(r"^services:\s*$",)), Claim(name=r"compose.*\.ya?ml$")),
        "compose",
        _DOCUMENTS,
    ),
    InputReader(
        "skypilot",
        "SkyPilot task YAML: the run: script, with envs:",
        # a top-level `run:` script next to the task's other sections
        # (https://docs.skypilot.co/en/latest/reference/yaml-spec.html)
        (Claim(text=("^run:", "^(?:resources|setup|num_nodes|envs|file_mounts|service):")),),
        "skypilot",
        _DOCUMENTS,
    ),
    InputReader(
        "vllm-config",
        "vLLM --config YAML (most top-level keys are vLLM flags)",
        (Claim(text=(r"^[A-Za-z_][A-Za-z0-9_.-]*:(?:\s|$)",), confirm="vllm_config:is_config"),),
        "vllm_config",
        _DOCUMENTS,
    ),
)

_BY_KIND: dict[str, InputReader] = {reader.kind: reader for reader in READERS}
# What --input-format accepts: every reader's kind.
FILE_FORMATS: tuple[str, ...] = tuple(_BY_KIND)
# The kind of an invocation found by the generic finder, and of argv given on the
# command line: kinds of invocations that no file reader is named for.
GENERIC = "generic"
ARGV = "argv"


def format_choices() -> str:
    """The --input-format kinds, comma-separated, for help texts and errors."""
    return ", ".join(FILE_FORMATS)


def reader_for(kind: str) -> InputReader | None:
    return _BY_KIND.get(kind)


def detect_kind(text: str, name: str) -> InputKind | None:
    """The kind of a file's content, or None when no reader takes it.

    A text naming ``vllm serve`` that fits no YAML kind and is not named as YAML is a
    script (a ``run`` file without a suffix or shebang).
    """
    lowered = name.lower()
    for reader in READERS:
        if reader.claims(text, lowered):
            return reader.kind
    if detect.is_script_text(text, lowered):
        return "shell"
    return None


def is_claimed(name: str) -> bool:
    """Whether a reader's name suffixes or names (Dockerfile, Makefile) claim this file."""
    lowered = name.lower()
    return lowered.endswith(_SUFFIXES) or any(
        _pattern(reader.names).search(lowered) is not None
        for reader in READERS
        if reader.names is not None
    )


# Every reader's name suffixes as one tuple, for str.endswith.
_SUFFIXES = tuple({suffix for reader in READERS for suffix in reader.suffixes})

# Files kvtool never opens, by name: documentation, media, archives, model weights,
# lock files, logs and compiled code. Nothing there starts a server as a deployment does
# (a README's `vllm serve` is an example to read, not a deployment to audit).
NEVER_READ_SUFFIXES: dict[str, tuple[str, ...]] = {
    "documentation": (".md", ".markdown", ".rst", ".adoc", ".html", ".htm", ".tex"),
    "media": (".png", ".jpg", ".jpeg", ".gif", ".svg", ".ico", ".webp", ".pdf", ".mp4", ".wav"),
    "archive": (".gz", ".tgz", ".zip", ".tar", ".bz2", ".xz", ".zst", ".whl", ".jar", ".7z"),
    "model or data": (
        ".safetensors", ".bin", ".gguf", ".pt", ".pth", ".onnx", ".npy", ".npz", ".parquet",
        ".arrow", ".h5", ".pkl", ".ckpt", ".csv", ".tsv", ".jsonl",
    ),
    "lock file": (".lock",),
    # A server's log echoes its command line: a record of a start, not a deployment.
    "log": (".log",),
    "compiled": (".pyc", ".so", ".o", ".a", ".dll", ".dylib", ".exe", ".class"),
}  # fmt: skip
_NEVER_READ = tuple(
    (suffix, kind) for kind, suffixes in NEVER_READ_SUFFIXES.items() for suffix in suffixes
)
_NEVER_READ_ALL = tuple(suffix for suffix, _ in _NEVER_READ)


def never_read(name: str) -> str | None:
    """Why a file of this name is never opened (a kind kvtool does not read), or None."""
    lowered = name.lower()
    if not lowered.endswith(_NEVER_READ_ALL):
        return None
    kind = next(kind for suffix, kind in _NEVER_READ if lowered.endswith(suffix))
    return f"{kind}: a kind of file kvtool does not read"


def describe() -> str:
    """The input kinds as Markdown (docs/audit-inputs.md): what each reads, in detection order."""
    rows = "".join(f"| `{reader.kind}` | {reader.summary} |\n" for reader in READERS)
    return (
        "# kvtool audit inputs\n\n"
        "Generated from `kvtool/audit/inputs/registry.py` by `scripts/gen_rule_docs.py`.\n"
        "Each file's kind is detected from its content, trying the kinds in this order\n"
        "(`--input-format KIND` forces one). A file no kind takes, or in which its\n"
        "reader finds nothing, is searched by the generic server finder (kind\n"
        "`generic`): `vllm serve` lines, `python -m vllm.entrypoints...`, argv lists\n"
        '(`["vllm", "serve", ...]`) and strings holding them, in any text file and\n'
        "any YAML/JSON string. A directory is walked for every file, `.gitignore`\n"
        "respected; documentation, media, archives and model files are never opened\n"
        "(counted in the summary). A file that starts no vLLM server, a chart\n"
        "template or an unreadable file is listed as skipped in the report.\n\n"
        "| kind | reads |\n|---|---|\n" + rows
    )
