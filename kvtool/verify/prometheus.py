"""Parse the Prometheus text exposition format (what vLLM's ``/metrics`` serves).

Only what verification needs: samples (name, labels, value); ``# HELP``/``# TYPE``
comments are skipped, timestamps ignored. A malformed line is a KvtoolError naming
the source and line number.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from kvtool.errors import KvtoolError

_ESCAPES = {"\\": "\\", '"': '"', "n": "\n"}


@dataclass(frozen=True)
class Sample:
    name: str
    labels: tuple[tuple[str, str], ...]
    value: float

    def label(self, key: str) -> str | None:
        return dict(self.labels).get(key)


@dataclass(frozen=True)
class Snapshot:
    """One scrape. Invariant: at most one sample per (name, labels)."""

    source: str
    samples: tuple[Sample, ...] = ()
    _by_name: dict[str, list[Sample]] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        for sample in self.samples:
            self._by_name.setdefault(sample.name, []).append(sample)

    def named(self, name: str) -> list[Sample]:
        return list(self._by_name.get(name, ()))

    def has(self, name: str) -> bool:
        return name in self._by_name

    def total(self, name: str, where: Mapping[str, str] | None = None) -> float:
        """Sum of ``name`` over all label sets (engines, models) matching ``where``."""
        wanted = dict(where or {})
        return sum(
            s.value
            for s in self._by_name.get(name, ())
            if all(s.label(k) == v for k, v in wanted.items())
        )


def _parse_labels(text: str, start: int, where: str) -> tuple[tuple[tuple[str, str], ...], int]:
    """Labels from ``{`` at ``start``; returns them and the index after ``}``."""
    labels: list[tuple[str, str]] = []
    i = start + 1
    while True:
        while i < len(text) and text[i] in " ,":
            i += 1
        if i < len(text) and text[i] == "}":
            return tuple(labels), i + 1
        eq = text.find("=", i)
        if eq < 0 or eq + 1 >= len(text) or text[eq + 1] != '"':
            raise KvtoolError(f"{where}: malformed label set")
        key = text[i:eq].strip()
        i = eq + 2
        value: list[str] = []
        while i < len(text) and text[i] != '"':
            if text[i] == "\\" and i + 1 < len(text):
                value.append(_ESCAPES.get(text[i + 1], "\\" + text[i + 1]))
                i += 2
            else:
                value.append(text[i])
                i += 1
        if i >= len(text):
            raise KvtoolError(f"{where}: unterminated label value")
        labels.append((key, "".join(value)))
        i += 1


def _parse_value(text: str, where: str) -> float:
    token = text.split()[0] if text.split() else ""
    try:
        return float(token)  # float() also reads NaN, +Inf and -Inf
    except ValueError:
        raise KvtoolError(f"{where}: {token!r} is not a sample value") from None


def parse(text: str, source: str) -> Snapshot:
    """Every sample in ``text``; ``source`` names it in errors (a file or URL)."""
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], Sample] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        where = f"{source}:{number}"
        brace = line.find("{")
        space = line.find(" ")
        if brace >= 0 and (space < 0 or brace < space):
            name = line[:brace]
            labels, end = _parse_labels(line, brace, where)
            rest = line[end:]
        else:
            if space < 0:
                raise KvtoolError(f"{where}: a sample needs a name and a value")
            name, rest, labels = line[:space], line[space:], ()
        if not name or not all(c.isalnum() or c in "_:" for c in name):
            raise KvtoolError(f"{where}: {name!r} is not a metric name")
        value = _parse_value(rest, where)
        key = (name, tuple(sorted(labels)))
        samples[key] = Sample(name, key[1], value)
    return Snapshot(source, tuple(samples.values()))


def counter_total(snapshot: Snapshot, name: str, where: Mapping[str, str] | None = None) -> float:
    """A counter's value under either exposition: ``name_total`` or bare ``name``.

    prometheus_client appends ``_total`` to counters; some exporters do not.
    """
    for candidate in (f"{name}_total", name):
        if snapshot.has(candidate):
            value = snapshot.total(candidate, where)
            return 0.0 if math.isnan(value) else value
    return 0.0


def counter_present(snapshot: Snapshot, name: str) -> bool:
    return snapshot.has(f"{name}_total") or snapshot.has(name)
