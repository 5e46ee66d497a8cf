"""Memory sizes as containers write them, in bytes.

Kubernetes resource quantities (``64Gi``, ``500M``, ``1e9``, ``128974848000m``):

The grammar is Kubernetes' own (https://kubernetes.io/docs/reference/kubernetes-api/common-definitions/quantity/):
a signed decimal number, then a binary suffix (Ki Mi Gi Ti Pi Ei), a decimal suffix
(m, none, k M G T P E) or a decimal exponent (``e3``, ``E-2``). A fractional byte count
is rounded up, as ``Quantity.Value()`` rounds. Exact arithmetic: ``0.1Gi`` is not a float.

Docker and Compose sizes (``shm_size: 16gb``, ``--shm-size 2g``, ``mem_limit: 64g``) use
go-units' ``RAMInBytes``: a number, an optional space, then k/m/g/t/p with optional ``i`` and
``b``, all powers of 1024 (https://github.com/docker/go-units/blob/v0.5.0/size.go).
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "m": Fraction(1, 1000),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_QUANTITY = re.compile(
    r"(?P<number>[+-]?(?:\d+\.?\d*|\.\d+))"
    r"(?:(?P<binary>[KMGTPE]i)|[eE](?P<exponent>[+-]?\d+)|(?P<decimal>[mkMGTPE]?))",
    re.ASCII,  # Arabic-Indic digits are no quantity to Kubernetes
)
_DOCKER_SIZE = re.compile(r"(\d+(?:\.\d+)*) ?([kKmMgGtTpP])?[iI]?[bB]?", re.ASCII)
_DOCKER_UNITS = {"k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40, "p": 2**50}
# Kubernetes refuses exponents past this; a bound also keeps 1e999999 from being computed.
_MAX_EXPONENT = 64
# Digits of a number read (Kubernetes' own parser stops far earlier): more are not a
# size, and int() would refuse them past the interpreter's digit limit.
_MAX_DIGITS = 64


def parse_bytes(text: str) -> int | None:
    """The byte count ``text`` means as a Kubernetes quantity; None when it is not one
    (or is negative: no memory size is)."""
    match = _QUANTITY.fullmatch(text.strip())
    if match is None or len(match["number"]) > _MAX_DIGITS:
        return None
    number = Fraction(match["number"])
    if match["binary"]:
        value = number * _BINARY[match["binary"]]
    elif match["exponent"] is not None:
        if len(match["exponent"]) > _MAX_DIGITS:
            return None
        exponent = int(match["exponent"])
        if abs(exponent) > _MAX_EXPONENT:
            return None
        value = number * Fraction(10) ** exponent
    else:
        value = number * _DECIMAL[match["decimal"] or ""]
    if value < 0:
        return None
    return math.ceil(value)


def parse_docker_bytes(text: str) -> int | None:
    """The byte count of a Docker/Compose size (``RAMInBytes``); None when it is not one."""
    match = _DOCKER_SIZE.fullmatch(text.strip())
    if match is None or match[1].count(".") > 1 or len(match[1]) > _MAX_DIGITS:
        return None
    multiplier = _DOCKER_UNITS[match[2].lower()] if match[2] else 1
    return int(Fraction(match[1]) * multiplier)
