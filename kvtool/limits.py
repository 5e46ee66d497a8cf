"""Every resource limit kvtool enforces on its inputs, named and documented in one place.

An input is hostile until read: a 369-byte script can ask for gigabytes of variable
expansion, a YAML file for billions of alias copies, a server for an endless body.
Each reader checks the limit below that bounds its work and raises
:class:`LimitExceeded` (a ``KvtoolError``: one line on stderr, exit 2) naming the
limit and how to raise it. Each limit can be changed for one run with the environment
variable ``KVTOOL_LIMIT_<NAME>`` (for instance ``KVTOOL_LIMIT_INPUT_BYTES=1000000``);
tests use that to enforce small caps.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from kvtool.errors import KvtoolError

_ENV_PREFIX = "KVTOOL_LIMIT_"


class LimitExceeded(KvtoolError):
    """An input asked for more work or memory than a named limit allows."""


@dataclass(frozen=True)
class Limit:
    """One named bound: ``value`` is the default unless ``KVTOOL_LIMIT_<NAME>`` overrides it."""

    name: str
    default: float
    unit: str
    why: str

    @property
    def env_var(self) -> str:
        return _ENV_PREFIX + self.name.upper()

    @property
    def value(self) -> float:
        raw = os.environ.get(self.env_var)
        if raw is None:
            return self.default
        try:
            parsed = float(raw)
        except ValueError:
            raise KvtoolError(f"{self.env_var}={raw!r}: expected a number") from None
        if not math.isfinite(parsed) or parsed <= 0:
            raise KvtoolError(f"{self.env_var}={raw!r}: expected a positive finite number")
        return parsed

    @property
    def count(self) -> int:
        """The limit as a whole number (sizes and counts)."""
        return int(self.value)

    def check(self, amount: float, what: str) -> None:
        """Raise ``LimitExceeded`` when ``amount`` is over the limit; ``what`` names the input."""
        if amount > self.value:
            raise LimitExceeded(self.message(what))

    def message(self, what: str) -> str:
        return f"{what}: {self.reason()}"

    def reason(self) -> str:
        """What :meth:`message` says after the input's name."""
        return (
            f"over the {self.name} limit ({_shown(self.value)} {self.unit}: {self.why}); "
            f"set {self.env_var} to raise it"
        )


def _shown(value: float) -> str:
    return str(int(value)) if value == int(value) else str(value)


INPUT_BYTES = Limit(
    "input_bytes", 16 * 1024 * 1024, "bytes", "largest input file read (scripts, manifests, traces)"
)
YAML_ALIASES = Limit(
    "yaml_aliases", 1_000, "aliases", "alias references in one YAML stream (alias bombs)"
)
YAML_NODES = Limit(
    "yaml_nodes", 1_000_000, "nodes", "nodes a YAML stream expands to once aliases are followed"
)
NESTING_DEPTH = Limit(
    "nesting_depth", 200, "levels", "nesting of lists and mappings in YAML, JSON or TOML"
)
INT_DIGITS = Limit(
    "int_digits", 4_300, "digits", "digits of one integer in JSON, TOML or a registry answer"
)
SHELL_EXPANSION_BYTES = Limit(
    "shell_expansion_bytes",
    16 * 1024 * 1024,
    "bytes",
    "characters variable expansion may add to one script's words",
)
SHELL_NESTING_DEPTH = Limit(
    "shell_nesting_depth",
    100,
    "levels",
    "nesting of ${...}, $(...) and ( subshells ) in one shell script",
)
HTTP_BODY_BYTES = Limit(
    "http_body_bytes", 64 * 1024 * 1024, "bytes", "body of one HTTP answer (registry, /metrics)"
)
HTTP_DEADLINE_S = Limit(
    "http_deadline_s", 120, "seconds", "one network operation from connect to last byte"
)
ARCHIVE_MEMBERS = Limit(
    "archive_members", 100_000, "members", "entries in one offline image archive"
)
ARCHIVE_RATIO = Limit(
    "archive_ratio",
    200,
    "x",
    "unpacked size of an archive's members over its own size (at least 1 MiB)",
)
POD_CONTAINERS = Limit(
    "pod_containers",
    256,
    "containers",
    "containers in one pod (every engine is checked against each of its pod mates)",
)
GITIGNORE_PATTERNS = Limit(
    "gitignore_patterns",
    2_000,
    "patterns",
    "patterns in one .gitignore of an audited directory (each file is matched against all)",
)
SIZING_LAYERS = Limit(
    "sizing_layers", 100_000, "layers", "num_hidden_layers (or a similar count) in a config.json"
)
SIMULATE_WORK = Limit(
    "simulate_work",
    200_000_000,
    "work units",
    "blocks of every request, 16 per request and one per scheduler step, summed over "
    "every setting of a sweep",
)

# Not adjustable: an exbibyte is past any host or GPU, and small enough that a size in
# GiB times 2**30 stays exact. Memory sizes in GiB (options and settings) stay within it.
MOST_GIB = float(1 << 30)

ALL: tuple[Limit, ...] = (
    INPUT_BYTES,
    YAML_ALIASES,
    YAML_NODES,
    NESTING_DEPTH,
    INT_DIGITS,
    SHELL_EXPANSION_BYTES,
    SHELL_NESTING_DEPTH,
    HTTP_BODY_BYTES,
    HTTP_DEADLINE_S,
    ARCHIVE_MEMBERS,
    ARCHIVE_RATIO,
    POD_CONTAINERS,
    GITIGNORE_PATTERNS,
    SIZING_LAYERS,
    SIMULATE_WORK,
)
