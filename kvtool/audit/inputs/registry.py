"""The one registry of input readers: kind -> detector + reader.

Detection (:func:`detect_kind`), the ``--input-format`` choices and their help
(:data:`FILE_FORMATS`, :func:`format_choices`), the files never opened
(:func:`never_read`) and the docs (:func:`describe`) all come from ``READERS``.
Adding an input kind is one reader module plus one entry here. A file no reader
takes, or whose reader finds nothing, is searched by the generic finder
(:mod:`.finder`, kind ``generic``).

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
    # True when the reader sees every place its form can start a command (Python's own
    # parser, make's recipes): where it finds nothing, the generic finder is not asked
    # (it would take a docstring's or message's `vllm serve` for a start).
    exhaustive: bool = False

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
        "notebook",
        "Jupyter notebooks: code cells' `!` shell lines, %%bash cells and Python "
        "(read as one program, in order), with %env; outputs are not read",
        detect.is_notebook,
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
        detect.is_python,
        "python_launcher",
        (".py",),
        detect.may_start_vllm,
        exhaustive=True,
    ),
    InputReader(
        "makefile",
        "Makefile and justfile recipes (make's line joining, $(VAR) and {{var}} values)",
        detect.is_make,
        "make_recipes",
        (".mk", ".just"),
        detect.may_start_vllm,
        exhaustive=True,
    ),
    InputReader(
        "systemd",
        "systemd units: ExecStart= with Environment= (EnvironmentFile= noted)",
        detect.is_systemd_unit,
        "systemd",
        (".service",),
        detect.may_start_vllm,
    ),
    InputReader(
        "nomad",
        "Nomad job files (HCL): each task's command, args, image and env block",
        detect.is_nomad_job,
        "nomad",
        (".nomad", ".hcl"),
        detect.may_start_vllm,
    ),
    InputReader(
        "cloud-init",
        "cloud-init user data: runcmd/bootcmd (strings and argv lists), write_files scripts",
        detect.is_cloud_config,
        "cloud_init",
        (),
        detect.may_start_vllm,
    ),
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
        "GitHub Actions workflows and composite actions (action.yml runs.steps): run: "
        "steps (vllm serve, python -m vllm..., docker run), env:",
        detect.is_github_workflow,
        "github_actions",
        _DOCUMENTS,
        detect.may_start_vllm,
    ),
    InputReader(
        "dstack",
        "dstack run configurations (.dstack.yml): commands: with env: and image:",
        detect.is_dstack,
        "dstack",
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
        if reader.detect(text, lowered):
            return reader.kind
    if detect.is_script_text(text, lowered):
        return "shell"
    return None


def is_claimed(name: str) -> bool:
    """Whether a reader's name suffixes (or Dockerfile/Makefile names) claim this file."""
    lowered = name.lower()
    return (
        lowered.endswith(_SUFFIXES)
        or detect.is_dockerfile_name(lowered)
        or detect.is_make("", lowered)
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
