"""What generated files may contain verbatim: checked names and one-line comment text.

Values are otherwise never pasted into generated text: shell words go through
``shlex.quote`` and YAML through the emitter. Names cannot be quoted into validity, so
they are checked: environment variable names as bash accepts them in ``export``, and
object names as Kubernetes accepts them (a DNS-1123 label that starts with a letter, so
a Service may carry it too). Comments carry user values (the model name) and are
written on one line with every line break and control character escaped: a newline in
``--model`` must not end the comment and run as shell or add YAML keys.
"""

from __future__ import annotations

import re

from kvtool.errors import KvtoolError
from kvtool.termsafe import terminal_line

# bash: a name is letters, digits and underscores, not starting with a digit.
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Kubernetes DNS-1035 label (stricter than DNS-1123: a Service name must start with a letter).
_OBJECT_NAME = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
# Room for the longest suffix kvtool adds ("-lmcache-server" and the like) within 63.
MAX_BASE_NAME = 40


def check_env_name(name: str, flag: str) -> str:
    if not _ENV_NAME.fullmatch(name):
        raise KvtoolError(
            f"{flag} {terminal_line(name)!r}: not a shell variable name "
            "(letters, digits and _, not starting with a digit)"
        )
    return name


def check_object_name(name: str, flag: str) -> str:
    if len(name) > MAX_BASE_NAME or not _OBJECT_NAME.fullmatch(name):
        raise KvtoolError(
            f"{flag} {terminal_line(name)!r}: not a valid Kubernetes/compose name (lower-case "
            f"letters, digits and '-', starting with a letter, at most {MAX_BASE_NAME} characters)"
        )
    return name


def check_host_path(path: str, flag: str) -> str:
    """A host directory as compose (``HOST:CONTAINER[:MODE]``) and Kubernetes ``hostPath``
    take it: absolute, with no ``:`` that would add a mount or its options, and no
    control characters."""
    if not path.startswith("/") or ":" in path or terminal_line(path) != path:
        raise KvtoolError(
            f"{flag} {terminal_line(path)!r}: give an absolute directory without ':' or "
            "control characters"
        )
    return path


def comment_text(value: object) -> str:
    """``value`` safe inside a one-line ``#`` comment of shell or YAML."""
    return terminal_line(str(value))
