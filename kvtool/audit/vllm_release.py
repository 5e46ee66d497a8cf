"""Which vLLM release an engine runs, read from what the deployment says besides its flags.

Precedence (the first that names a release wins; ``kvtool audit --help`` and
docs/audit.md say the same):

1. ``--vllm-version`` or the ``vllm-version`` setting (the engine, not this module);
2. a ``pip install vllm==X`` / ``uv pip install vllm==X`` in the file the engine is read
   from (a script, a container's ``sh -c``, a Dockerfile ``RUN``), or a ``vllm==X`` item
   of a package list there (Modal's ``.pip_install("vllm==0.7.2")``, a YAML
   ``- vllm==0.6.3`` under ``requirements:``/``pip:``): it replaces whatever the image
   holds;
3. the Dockerfile a compose service is built from (``build:`` context and dockerfile,
   its ``args:`` replacing the Dockerfile's ARG defaults), or, for a Dockerfile's own
   ENTRYPOINT/CMD, that Dockerfile: its pip pin, else its ``FROM`` image's tag (ARG
   defaults applied);
4. the engine's image tag: vLLM's own images, and derived images only through the
   curated table ``rules/images/entrypoints.toml`` (a tag of another project is never
   read as a vLLM release);
5. a serving-runtime annotation or label in the engine's file
   (``opendatahub.io/runtime-version: v0.9.1.0``), when it names a tabled vLLM release;
6. a Dockerfile in the engine file's directory, for an engine whose file names no image
   that says a release (its pip pin, else its ``FROM`` image's tag);
7. a requirement pin (``vllm==X`` in ``requirements*.txt`` or ``pyproject.toml``) the
   input set agrees on;
8. else the newest table (the engine says so in its warning).

Every answer carries where it was read, and the report prints it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from functools import lru_cache
from typing import Literal

import msgspec

from kvtool.audit.model import Finding, Invocation
from kvtool.releases.model import ReleaseIndex
from kvtool.versions import InvalidVersion, Version

ClaimSource = Literal["pip", "build", "image", "annotation", "dockerfile", "requirement"]

# ASCII digits, at most nine a part; an optional fourth part (0.9.0.1, ODH's v0.9.1.0).
_RELEASE = r"v?(\d{1,9}\.\d{1,9}(?:\.\d{1,9}){0,2}(?:(?:\.post|rc|\.dev)\d{1,9})?)"
# vLLM's distributions: vllm itself and its CPU build.
_PACKAGE = r"vllm(?:-cpu)?(?:\[[\w,\s-]*\])?"
_COMMAND = re.compile(r"[^;&|\n]+")
_MENTION = re.compile(r"vllm|runtime-version", re.IGNORECASE)
_PIP_INSTALL = re.compile(r"\bpip3?[ \t]+install\b", re.IGNORECASE)
# `vllm==0.11.2`, `"vllm[audio]==0.9.2"`, `vllm==${VLLM_VERSION}`.
_PIN = re.compile(
    r"(?<![\w.-])[\"']?" + _PACKAGE + r"[ \t]*==[ \t]*(?:" + _RELEASE + r"|\$\{?(\w+)\}?)"
    r"(?![\w.])",
    re.IGNORECASE | re.ASCII,
)
# `pip install git+https://github.com/vllm-project/vllm.git@v0.8.5`
_GIT_PIN = re.compile(r"vllm-project/vllm(?:\.git)?@" + _RELEASE + r"(?![\w.])", re.ASCII)
_REQUIREMENT = re.compile(
    r"^[ \t]*[\"']?"
    + _PACKAGE
    + r"[ \t]*==[ \t]*"
    + _RELEASE
    + r"[\"']?[ \t]*,?[ \t]*(?:[;#].*)?$",
    re.IGNORECASE | re.MULTILINE | re.ASCII,
)
# A package list's item that is only a vLLM pin: a quoted string (Modal's
# `.pip_install("vllm==0.7.2", ...)`, `.uv_pip_install("vllm==0.15.0")`, Ray's
# `runtime_env={"pip": ["vllm==0.8.5"]}`, pyproject's `dependencies = ["vllm==0.8.4"]`),
# a YAML list item (`- vllm==0.6.3` under a Truss `requirements:`) or a line that is only
# the pin after a key (tox's `deps = vllm==0.6.3`, and its continuation lines): the
# package the program's image or environment installs.
_LISTED_PIN = re.compile(
    r"""(?:(["'])|^[ \t]*(?:-[ \t]+|[\w.-]+[ \t]*[=:][ \t]*)?["']?)"""
    r"(" + _PACKAGE + r"[ \t]*==[ \t]*" + _RELEASE + r""")(?:\1|["']?[ \t]*(?:[;#].*)?$)""",
    re.IGNORECASE | re.MULTILINE | re.ASCII,
)
# `opendatahub.io/runtime-version: 'v0.9.1.0'`, `vllm-version: "0.6.3"` (annotations, labels).
_ANNOTATION = re.compile(
    r"^[ \t]*[\"']?((?:[\w.-]+/)?(?:runtime-version|vllm[-_.]version))[\"']?[ \t]*:[ \t]*"
    r"[\"']?" + _RELEASE + r"[\"']?[ \t]*$",
    re.IGNORECASE | re.MULTILINE | re.ASCII,
)
# A default a Dockerfile or script gives the variable a pin names (`ARG VLLM_VERSION=0.9.2`).
_ASSIGNMENT = r"^[ \t]*(?:ARG[ \t]+|ENV[ \t]+|export[ \t]+)?NAME[ \t]*[= ][ \t]*[\"']?" + _RELEASE
# `FROM vllm/vllm-openai:${VLLM_VERSION}` after `ARG VLLM_VERSION=v0.12.0`.
_VARIABLE = re.compile(r"\$\{?(\w+)\}?")
_FROM = re.compile(r"^[ \t]*FROM[ \t]+(?:--\S+[ \t]+)*(\S+)", re.IGNORECASE | re.MULTILINE)
# Files read from disk for build evidence are Dockerfiles: a few kB. The cap guards a walk
# that meets a huge file named like one.
_DOCKERFILE_BYTES = 1 << 20


class ReleaseClaim(msgspec.Struct, frozen=True):
    """A vLLM release the input names, how, and where (``pip install vllm==0.11.2 at x:5``)."""

    version: str
    source: ClaimSource
    origin: str
    file: str | None = None


def is_requirements_name(name: str) -> bool:
    """``requirements.txt``, ``requirements-gpu.txt``, ``requirements/base.txt`` and
    ``pyproject.toml``: files whose pins install vLLM."""
    base = os.path.basename(name).lower()
    if base == "pyproject.toml":
        return True
    parent = os.path.basename(os.path.dirname(name)).lower()
    return base.endswith(".txt") and (base.startswith("requirements") or parent == "requirements")


def claims_in_text(text: str, file: str) -> tuple[ReleaseClaim, ...]:
    """Every literal vLLM release one file states: pip pins, requirement pins, annotations."""
    if _MENTION.search(text) is None:  # most files of a walk: one scan, no copy
        return ()
    lines = _Lines(text)
    found: list[tuple[int, ReleaseClaim]] = []
    if is_requirements_name(file):
        lines_taken: set[int] = set()
        for match in _REQUIREMENT.finditer(text):
            version = match.group(1)
            at = lines.line_of(match.start())
            lines_taken.add(at)
            origin = f"requirement vllm=={version} at {file}:{at}"
            found.append((match.start(), ReleaseClaim(version, "requirement", origin, file)))
        for match in _LISTED_PIN.finditer(text):  # `dependencies = ["vllm==0.9.2", ...]`
            at = text.count("\n", 0, match.start()) + 1
            if at in lines_taken:
                continue
            version = match.group(3)
            origin = f"requirement vllm=={version} at {file}:{at}"
            found.append((match.start(), ReleaseClaim(version, "requirement", origin, file)))
        found.sort(key=lambda item: item[0])
        return tuple(claim for _, claim in found)
    joined = text.replace("\\\n", "  ")  # same length: offsets still give the line
    installs: list[int] = []
    for at, version, spelled in _pip_pins(joined):
        origin = f"pip install {spelled} at {file}:{lines.line_of(at)}"
        found.append((at, ReleaseClaim(version, "pip", origin, file)))
        installs.append(at)
    for match in _LISTED_PIN.finditer(text):
        if _inside_install(joined, match.start(), installs):
            continue  # the `pip install "vllm==X"` already read above
        version = match.group(3)
        origin = f"package list {match.group(2)} at {file}:{lines.line_of(match.start())}"
        found.append((match.start(), ReleaseClaim(version, "pip", origin, file)))
    for match in _ANNOTATION.finditer(text):
        key, version = match.group(1), match.group(2)
        origin = f"{key}: {version} at {file}:{lines.line_of(match.start())}"
        found.append((match.start(), ReleaseClaim(version, "annotation", origin, file)))
    found.sort(key=lambda item: item[0])
    return tuple(claim for _, claim in found)


def _pip_pins(text: str) -> Iterable[tuple[int, str, str]]:
    """(offset, release, how it was written) of the first vLLM pin after each `pip install`."""
    for command in _COMMAND.finditer(text):
        position, end = command.start(), command.end()
        while (install := _PIP_INSTALL.search(text, position, end)) is not None:
            pin = _PIN.search(text, install.end(), end)
            git = _GIT_PIN.search(text, install.end(), end)
            if git is not None and (pin is None or git.start() < pin.start()):
                yield install.start(), git.group(1), git.group(0)
                position = git.end()
                continue
            if pin is None:
                break
            version = pin.group(1) or _assigned(text, pin.group(2), install.start())
            if version is not None:
                yield install.start(), version, f"vllm=={version}"
            position = pin.end()


def _inside_install(text: str, offset: int, installs: list[int]) -> bool:
    """Whether ``offset`` is in the same command as one of the ``pip install`` offsets."""
    line_start = max(text.rfind(stop, 0, offset) for stop in (";", "&", "|", "\n")) + 1
    return any(line_start <= at < offset for at in installs)


def _assigned(text: str, name: str | None, before: int) -> str | None:
    """The last literal release ``name`` is given before offset ``before`` (ARG, ENV, shell)."""
    if name is None:
        return None
    pattern = re.compile(_ASSIGNMENT.replace("NAME", re.escape(name), 1), re.MULTILINE | re.ASCII)
    values = [m.group(1) for m in pattern.finditer(text, 0, before)]
    return values[-1] if values else None


class _Lines:
    """Line numbers of offsets, counted through the text once for increasing offsets."""

    def __init__(self, text: str) -> None:
        self.text, self.offset, self.line = text, 0, 1

    def line_of(self, offset: int) -> int:
        if offset < self.offset:
            self.offset, self.line = 0, 1
        self.line += self.text.count("\n", self.offset, offset)
        self.offset = offset
        return self.line


# -- Dockerfiles an engine is built from ---------------------------------------------------


BuildArgs = tuple[tuple[str, str], ...]


@lru_cache(maxsize=256)
def dockerfile_claim(
    path: str, how: Literal["build", "dockerfile"], why: str = "", build_args: BuildArgs = ()
) -> ReleaseClaim | None:
    """What the Dockerfile at ``path`` says: its pip pin of vLLM, else its FROM image's tag.

    ``why`` says in the origin how the engine relates to the Dockerfile; ``build_args``
    (a compose ``build: args:``) replace the defaults of the ARGs they name, as
    ``docker build --build-arg`` does."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(_DOCKERFILE_BYTES)
        text = data.decode("utf-8", errors="replace")
    except OSError:
        return None
    text, applied = _with_build_args(text, build_args)
    if applied:
        why = f"{why}, build arg {', '.join(applied)}" if why else f"build arg {', '.join(applied)}"
    suffix = f" ({why})" if why else ""
    pins = [c for c in claims_in_text(text, path) if c.source == "pip"]
    if pins:
        last = pins[-1]
        return ReleaseClaim(last.version, how, last.origin + suffix, path)
    from kvtool.releases.images import vllm_version_of_image

    for match in reversed(list(_FROM.finditer(text))):  # the last stage is the one that runs
        image = _with_defaults(match.group(1), text, match.start())
        version = vllm_version_of_image(image)
        if version is not None:
            origin = f"FROM {image} in {path}{suffix}"
            return ReleaseClaim(version, how, origin, path)
    return None


_ARG_LINE = re.compile(r"^([ \t]*ARG[ \t]+)(\w+)(?:=[^\n]*)?$", re.IGNORECASE | re.MULTILINE)


def _with_build_args(text: str, build_args: BuildArgs) -> tuple[str, list[str]]:
    """``text`` with each ``ARG NAME[=default]`` a build arg names given its value (one line
    for one line, so line numbers stay), and the ``NAME=value`` pairs that were used."""
    if not build_args:
        return text, []
    given = dict(build_args)
    applied: list[str] = []

    def replace(match: re.Match[str]) -> str:
        name = match.group(2)
        if name not in given:
            return match.group(0)
        applied.append(f"{name}={given[name]}")
        return f"{match.group(1)}{name}={given[name]}"

    return _ARG_LINE.sub(replace, text), sorted(set(applied))


def _with_defaults(word: str, text: str, before: int) -> str:
    """``word`` with each ``$NAME`` / ``${NAME}`` replaced by the default an earlier ARG or
    ENV gives it (left empty when none does)."""

    def default(variable: re.Match[str]) -> str:
        pattern = re.compile(
            _ASSIGNMENT.replace("NAME", re.escape(variable.group(1)), 1).replace(
                _RELEASE, r"([^\s\"']+)"
            ),
            re.MULTILINE | re.ASCII,
        )
        values = [m.group(1) for m in pattern.finditer(text, 0, before)]
        return values[-1] if values else ""

    return _VARIABLE.sub(default, word)


class ComposeBuild(msgspec.Struct, frozen=True):
    dockerfile: str  # its path
    args: BuildArgs = ()  # the ``build: args:`` given to it, interpolated


def compose_build_dockerfile(invocation: Invocation) -> ComposeBuild | None:
    """The Dockerfile a compose service is built from (``build:`` context / dockerfile)."""
    if invocation.kind != "compose" or invocation.file is None:
        return None
    service = invocation.label.rsplit(": service ", 1)[-1]
    return _compose_builds(invocation.file).get(service)


@lru_cache(maxsize=64)
def _compose_builds(file: str) -> dict[str, ComposeBuild]:
    """service -> the Dockerfile its ``build:`` names (relative to the compose file) and the
    build args it passes."""
    import yaml

    from kvtool.yamlio import safe_loader

    try:
        with open(file, "rb") as handle:
            text = handle.read(_DOCKERFILE_BYTES).decode("utf-8", errors="replace")
        documents = list(yaml.load_all(text, Loader=safe_loader()))
    except (OSError, yaml.YAMLError, RecursionError):
        return {}
    base = os.path.dirname(file) or "."
    builds: dict[str, ComposeBuild] = {}
    for document in documents:
        services = document.get("services") if isinstance(document, dict) else None
        if not isinstance(services, dict):
            continue
        for name, service in services.items():
            build = service.get("build") if isinstance(service, dict) else None
            args: BuildArgs = ()
            if isinstance(build, str):
                context, dockerfile = build, "Dockerfile"
            elif isinstance(build, dict) and isinstance(build.get("context", "."), str):
                context = build.get("context", ".")
                dockerfile = build.get("dockerfile", "Dockerfile")
                if not isinstance(dockerfile, str):
                    continue
                args = _build_args(build.get("args"), base)
            else:
                continue
            path = os.path.normpath(os.path.join(base, context, dockerfile))
            builds[str(name)] = ComposeBuild(path, args)
    return builds


def _compose_image(invocation: Invocation) -> tuple[str, str]:
    """A compose service's image with compose's interpolation applied (``image:
    vllm/vllm-openai:${VLLM_TAG:-v0.9.1}``, the ``.env`` beside the file first), and how
    it was; the image as written when it has no variable or one whose value is unknown."""
    image = invocation.image or ""
    if invocation.kind != "compose" or invocation.file is None or "$" not in image:
        return image, ""
    # imported here: kvtool.audit.inputs imports this module
    from kvtool.audit.inputs import compose_env

    base = os.path.dirname(invocation.file) or "."
    dotenv = compose_env.dotenv(base)
    interpolated = compose_env.interpolate(image, dotenv)
    if interpolated is None or interpolated == image:
        return image, ""
    sources = ", ".join(
        f"{name} from {os.path.join(base, '.env')}" if name in dotenv else f"{name} default"
        for name in compose_env.names_in(image)
    )
    return interpolated, f"written {image.strip()}: {sources}"


def _build_args(written: object, base: str) -> BuildArgs:
    """A ``build: args:`` mapping or ``NAME=value`` list, each value interpolated from the
    ``.env`` file beside the compose file (compose's default), else its ``:-`` default; an
    arg whose value is unknown is left out (the Dockerfile's default stands)."""
    from kvtool.audit.inputs import compose_env

    pairs: list[tuple[str, object]] = []
    if isinstance(written, dict):
        pairs = [(str(k), v) for k, v in written.items()]
    elif isinstance(written, list):
        pairs = [tuple(str(item).split("=", 1)) for item in written if "=" in str(item)]  # type: ignore[misc]
    known: list[tuple[str, str]] = []
    for name, value in pairs:
        if value is None or isinstance(value, (dict, list)):
            continue
        interpolated = compose_env.interpolate(str(value), compose_env.dotenv(base))
        if interpolated:
            known.append((name, interpolated))
    return tuple(known)


def sibling_dockerfile(file: str | None) -> str | None:
    """A ``Dockerfile`` next to ``file`` (not ``file`` itself)."""
    if file is None or file.startswith("<"):  # <stdin>: no directory to look in
        return None
    candidate = os.path.join(os.path.dirname(file) or ".", "Dockerfile")
    if os.path.abspath(candidate) == os.path.abspath(file) or not os.path.isfile(candidate):
        return None
    return candidate


# -- the precedence -------------------------------------------------------------------------


def resolve(
    invocation: Invocation, claims: Sequence[ReleaseClaim], *, tabled: Sequence[str]
) -> ReleaseClaim | None:
    """The release of one engine from the input (steps 2-7 of the module docstring).

    ``claims`` are the input set's (:func:`claims_in_text` over its files); ``tabled``
    the releases with a table, which an annotation must name to count.
    """
    own = [c for c in claims if invocation.file is not None and c.file == invocation.file]
    pinned = [c for c in own if c.source == "pip"]
    if pinned:
        return pinned[-1]  # a later install replaces an earlier one
    build = compose_build_dockerfile(invocation)
    built = "the compose service is built from it"
    if build is not None and (
        claim := dockerfile_claim(build.dockerfile, "build", built, build.args)
    ):
        return claim
    # A Dockerfile's own ENTRYPOINT/CMD: its FROM names the base image (ARG defaults
    # applied, which the image the reader saw may still spell as ${VAR}).
    own_dockerfile = invocation.file if invocation.kind == "dockerfile" else None
    if own_dockerfile and (claim := dockerfile_claim(own_dockerfile, "dockerfile")):
        return claim
    if invocation.image:
        from kvtool.releases.images import vllm_version_of_image

        image, interpolated = _compose_image(invocation)
        tagged = vllm_version_of_image(image)
        if tagged is not None:
            how = f" ({interpolated})" if interpolated else ""
            return ReleaseClaim(tagged, "image", f"image tag {image.strip()}{how}")
    annotated = [c for c in own if c.source == "annotation" and _names_tabled(c.version, tabled)]
    if annotated:
        return _agreed(annotated)
    if invocation.kind != "dockerfile":
        sibling = sibling_dockerfile(invocation.file)
        beside = f"the Dockerfile next to {os.path.basename(invocation.file or '')}"
        if sibling is not None and (claim := dockerfile_claim(sibling, "dockerfile", beside)):
            return claim
    required = [c for c in claims if c.source == "requirement"]
    if required:
        return _agreed(required)
    return None


def _names_tabled(version: str, tabled: Sequence[str]) -> bool:
    """Whether ``version`` is a tabled release (``0.9.1.0`` is 0.9.1, as PEP 440 pads)."""
    try:
        wanted = Version(version)
    except InvalidVersion:
        return False
    return any(Version(v) == Version(wanted.base_version) for v in tabled)


def _agreed(claims: Sequence[ReleaseClaim]) -> ReleaseClaim | None:
    """The claim when all name one release; None when they disagree (release unknown)."""
    versions = {Version(c.version) for c in claims if _valid(c.version)}
    return claims[-1] if len(versions) == 1 else None


def _valid(version: str) -> bool:
    try:
        Version(version)
    except InvalidVersion:
        return False
    return True


# -- what is checked when the release is unknown --------------------------------------------

# Findings about a flag, env var or connector that no tabled release has hold whatever the
# release is (a typo is a typo); every other version-gate finding depends on the release.
_NAME_GATES = {"VG001": "flags", "VG010": "env_vars"}
_VERSION_GATE = "VG"


def holds_at_every_release(finding: Finding, index: ReleaseIndex) -> bool:
    """Whether ``finding`` stands for a release kvtool cannot place (older than every
    table, or an image whose tag is another project's): non-version-gate findings do,
    and a name no release has; flags, choices and removals of one release do not."""
    if not finding.code.startswith(_VERSION_GATE):
        return True
    gates = _NAME_GATES.get(finding.code)
    if gates is None or finding.flag is None:
        return False
    known: dict[str, object] = getattr(index, gates)
    return finding.flag not in known
