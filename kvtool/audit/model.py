"""Data passed from the input readers to the rules: the audit's internal contract.

Flow: input text -> ``Invocation`` (tokens that remember where they came from) ->
``ServeConfig`` (normalised the way vLLM's parser at the target release would) ->
rules -> ``Finding``s -> a renderer per output format. Data flows one way.

Records are ``msgspec.Struct``s: they are built on every audit's cold-start path, where
a pydantic import plus its model builds would cost more than the audit itself.
Frozen ones are hashable; ``msgspec.structs.replace`` makes edited copies.
"""

from __future__ import annotations

from enum import Enum
from typing import Any, Literal

import msgspec


class Location(msgspec.Struct, frozen=True, kw_only=True):
    """Where a token, env var or key was written; any part may be unknown."""

    file: str | None = None
    line: int | None = None  # 1-based
    column: int | None = None  # 1-based
    end_column: int | None = None  # 1-based, exclusive (SARIF endColumn), on end_line
    end_line: int | None = None  # set when the token ends on a later line than it starts


class SourceToken(msgspec.Struct, frozen=True, kw_only=True):
    """One argv word as written, with its origin."""

    text: str
    location: Location | None = None
    conditional: bool = False  # came from a ${VAR:+...} expansion: present only sometimes
    index: int | None = None  # position in the argv given to ``read_argv`` (argv inputs only)


class EnvAssignment(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    value: str | None  # None when the value is not known statically (valueFrom, $OTHER)
    location: Location | None = None
    conditional: bool = False


class Suppression(msgspec.Struct, kw_only=True):
    """An inline or annotation suppression: ``# kvtool: ignore[CODE] reason``."""

    codes: tuple[str, ...]  # codes or rule names, as written
    reason: str | None
    location: Location | None = None
    scope: Literal["line", "invocation", "file"] = "line"
    # For scope "line": the line whose findings it silences (the comment's own line, or
    # the next code line when the comment stands alone); ``location`` is the comment.
    target_line: int | None = None


# The reader that read an invocation: a kind of kvtool.audit.inputs.registry.READERS
# (the one list of input kinds), "generic" for the generic server finder, "argv" for a
# command given on kvtool's own command line.
InputKind = str

# The input kinds --fix rewrites in place (the rest get their fixes listed); YAML ones are
# read back after the edit, so a rewrite that would not parse as the fixed command is left.
YAML_REWRITABLE: frozenset[InputKind] = frozenset({"kubernetes", "compose"})
_COMMAND_REWRITABLE: frozenset[InputKind] = frozenset({"argv", "shell"})
REWRITABLE: frozenset[InputKind] = _COMMAND_REWRITABLE | YAML_REWRITABLE


class SkippedInput(msgspec.Struct, frozen=True, kw_only=True):
    """A file the audit read no invocation from, and why (shown in the report, never fatal)."""

    file: str
    reason: str  # one line: "starts no vLLM server", "invalid YAML at 3:1: ...", "Helm template"
    # True when the file could not be read at all (undecodable, invalid YAML, shell syntax):
    # such a file may hide a server, so it fails the run like a finding would.
    problem: bool = False
    # A chart template no renderer was here for (or that Helm could not render): what its
    # text showed was audited, but not what the chart deploys. It fails the run unless
    # --allow-unrendered.
    unrendered: bool = False
    # True for a file of a kind kvtool never opens (documentation, media, archives).
    never_read: bool = False

    def describe(self) -> str:
        """``file: reason``, or ``file:3:1: reason`` when the reason starts at a position."""
        return f"{self.file}{':' if self.reason[:1].isdigit() else ': '}{self.reason}"


class Quantity(msgspec.Struct, frozen=True, kw_only=True):
    """A memory size as written (``64Gi``, ``16gb``) and its value in bytes."""

    text: str
    bytes: int
    location: Location | None = None


class VolumeMount(msgspec.Struct, frozen=True, kw_only=True):
    """A pod volume mounted into the engine's container, with what backs it."""

    mount_path: str
    volume: str  # the volume's name
    source: str | None  # the volume source kind: "emptyDir", "hostPath", ...; None: not found
    medium: str | None = None  # emptyDir ``medium`` ("Memory": a tmpfs counted as memory)
    size_limit: Quantity | None = None  # emptyDir ``sizeLimit``
    location: Location | None = None  # the volumeMount's mountPath


class ContainerResources(msgspec.Struct, frozen=True, kw_only=True):
    """What the engine's pod gives its container: memory, volumes and the host IPC namespace.

    Read from a Kubernetes PodSpec (``resources``, ``volumeMounts`` joined with the
    pod's ``volumes``, ``hostIPC``) or a Compose service (``mem_limit`` or
    ``deploy.resources.limits.memory``, ``shm_size``, ``ipc: host``); rules about host
    memory and ``/dev/shm`` read it.
    """

    memory_limit: Quantity | None = None
    memory_request: Quantity | None = None
    mounts: tuple[VolumeMount, ...] = ()
    host_ipc: Location | None = None  # where ``hostIPC: true`` / ``ipc: host`` was written
    # Where ``hostNetwork: true`` was written: the pod listens in the node's namespace.
    host_network: Location | None = None
    shm_size: Quantity | None = None  # Docker/Compose ``shm_size``: the /dev/shm tmpfs size

    def mount_at(self, path: str) -> VolumeMount | None:
        """The mount whose path is ``path`` (trailing slashes ignored), the last if several."""
        wanted = path.rstrip("/") or "/"
        found = [m for m in self.mounts if (m.mount_path.rstrip("/") or "/") == wanted]
        return found[-1] if found else None


class PodContainer(msgspec.Struct, frozen=True, kw_only=True):
    """Another container of the pod a vLLM command runs in (a routing sidecar, a cache
    server), as written: rules about what runs next to the engine read it."""

    name: str
    image: str | None = None
    argv: tuple[SourceToken, ...] = ()  # ``command`` then ``args``, one word each
    location: Location | None = None  # where the container is written
    # Whether the container is given GPUs: a ``*/gpu`` resource above 0 or a visible-devices
    # env var; False when it states neither, None when a DRA claim may give it some.
    gpus: bool | None = None
    # The ``ports[].containerPort`` values it declares: where it listens, by convention.
    ports: tuple[int, ...] = ()


class Invocation(msgspec.Struct, kw_only=True):
    """One ``vllm serve`` command found in an input, before normalisation.

    ``tokens`` are the words after ``serve`` (or after the api_server module), the
    positional model included; an input with several commands yields several.
    """

    kind: InputKind
    label: str  # human name: "deploy.yaml: Deployment/vllm container vllm", "run.sh:12"
    file: str | None = None
    tokens: tuple[SourceToken, ...] = ()
    env: tuple[EnvAssignment, ...] = ()
    image: str | None = None  # container image, when the input names one
    # The other containers of the same pod (Kubernetes inputs; init containers included).
    pod_containers: tuple[PodContainer, ...] = ()
    suppressions: tuple[Suppression, ...] = ()
    # Options read from a --config YAML are already key/value pairs, not argv words.
    config_items: tuple[tuple[str, Any, Location | None], ...] = ()
    # Settings of the tool that wraps vLLM, outside vLLM's own flags, e.g. KAITO's
    # top-level ``kv_cache_cpu_memory_utilization`` (key -> (value, location)).
    settings: dict[str, tuple[Any, Location | None]] = msgspec.field(default_factory=dict)
    # What the reader could not resolve, e.g. a --config file that is not on this machine.
    notes: tuple[str, ...] = ()
    # The container's memory, volumes and IPC namespace, for inputs that describe a pod.
    resources: ContainerResources | None = None


class ServeOption(msgspec.Struct, kw_only=True):
    """One option after normalisation: canonical flag name and its value."""

    flag: str  # canonical long form at the target release, e.g. "--kv-offloading-size"
    value: Any = None  # str for plain flags, True/False for booleans, dict for JSON flags
    written: str  # the spelling the user wrote, e.g. "--kv_offloading_size" or "-tp"
    location: Location | None = None
    conditional: bool = False
    known: bool = True  # False when the target release has no such flag
    # For a dotted JSON key (``--kv-transfer-config.kv_connector X``): the keys below
    # the flag, and ``value`` is that leaf value; () for a whole flag value.
    key_path: tuple[str, ...] = ()
    # True when a later occurrence of the same flag replaced this one, as argparse
    # keeps only the last; such an option has no effect on the served config.
    overridden: bool = False


class ParseProblem(msgspec.Struct, kw_only=True):
    """Something vLLM's own parser would reject before any rule runs."""

    message: str
    flag: str | None = None
    location: Location | None = None


class ServeConfig(msgspec.Struct, kw_only=True):
    """A normalised serve configuration at one target release."""

    invocation: Invocation
    vllm_version: str
    model: str | None = None
    options: tuple[ServeOption, ...] = ()
    # JSON-valued flags after merging whole JSON, dotted keys and "+" appends, in order.
    json_values: dict[str, dict[str, Any]] = msgspec.field(default_factory=dict)
    env: dict[str, EnvAssignment] = msgspec.field(default_factory=dict)
    problems: tuple[ParseProblem, ...] = ()

    def option(self, flag: str) -> ServeOption | None:
        """The effective (last) occurrence of ``flag``, as argparse keeps the last."""
        found = [o for o in self.options if o.flag == flag]
        return found[-1] if found else None


class Severity(str, Enum):
    info = "info"
    warning = "warning"
    error = "error"

    @property
    def rank(self) -> int:
        return ("info", "warning", "error").index(self.value)


class Fix(msgspec.Struct, kw_only=True):
    applicability: Literal["safe", "unsafe", "display"]
    description: str
    # Token-level edit for argv and shell inputs: replace these tokens by ``replacement``.
    remove_tokens: tuple[SourceToken, ...] = ()
    replacement: tuple[str, ...] = ()
    # The replacement words go after the tokens, which stay: an addition anchored at a
    # word, so it never clashes with another fix that edits that word itself.
    insert_after: bool = False


class Finding(msgspec.Struct, kw_only=True):
    code: str
    name: str
    severity: Severity
    message: str
    flag: str | None = None  # flag, env var or config key, spelled as vLLM spells it
    location: Location | None = None
    fix: Fix | None = None
    invocation: str | None = None  # Invocation.label
    evidence: dict[str, Any] = msgspec.field(default_factory=dict)
