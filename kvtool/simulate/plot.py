"""A picture of a sweep: host hit rate against bytes written, one point per setting.

SVG is written here (no dependency); PNG goes through matplotlib when it is
installed, and is refused with one line when it is not. Points of one policy are
joined in sweep order, so a knob's effect shows as a path.
"""

from __future__ import annotations

import importlib.util
import io
from collections.abc import Sequence
from pathlib import Path
from xml.sax.saxutils import escape

from kvtool.errors import KvtoolError
from kvtool.simulate.advice import setting_label
from kvtool.simulate.engine import SimResult

FORMATS = ("svg", "png")
_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")
_W, _H = 720, 440
_LEFT, _RIGHT, _TOP, _BOTTOM = 70, 200, 40, 60
_GIB = 1 << 30


def plot_format(path: Path) -> str:
    """The format a ``--plot`` path asks for; a KvtoolError for anything else."""
    suffix = path.suffix.lower().lstrip(".")
    if suffix not in FORMATS:
        raise KvtoolError(f"--plot {path}: use a .svg or .png file name")
    if suffix == "png" and importlib.util.find_spec("matplotlib") is None:
        raise KvtoolError(f"--plot {path}: PNG needs matplotlib (pip install matplotlib); "
                          "an .svg file needs nothing")
    return suffix


def _series(results: Sequence[SimResult]) -> dict[str, list[tuple[float, float, str]]]:
    out: dict[str, list[tuple[float, float, str]]] = {}
    for r in results:
        policy = str(r.extra_config.get("kvtool.policy", "?"))
        out.setdefault(policy, []).append((r.bytes_stored / _GIB, r.external_hit_rate * 100,
                                           setting_label(r.extra_config)))
    return out


def _ticks(high: float) -> list[float]:
    if high <= 0:
        return [0.0]
    step = 10 ** _floor_log10(high / 5)
    for factor in (1, 2, 5, 10):
        if high / (step * factor) <= 6:
            step *= factor
            break
    return [i * step for i in range(int(high / step) + 2)]


def _floor_log10(value: float) -> int:
    exponent = 0
    while value >= 10:
        value /= 10
        exponent += 1
    while value < 1:
        value *= 10
        exponent -= 1
    return exponent


def svg(results: Sequence[SimResult], title: str) -> str:
    """The sweep as a standalone SVG document."""
    series = _series(results)
    xs = [p[0] for points in series.values() for p in points]
    ys = [p[1] for points in series.values() for p in points]
    x_ticks, y_ticks = _ticks(max(xs, default=0.0)), _ticks(max(ys, default=0.0))
    x_hi, y_hi = x_ticks[-1] or 1.0, y_ticks[-1] or 1.0
    plot_w, plot_h = _W - _LEFT - _RIGHT, _H - _TOP - _BOTTOM

    def px(x: float) -> float:
        return _LEFT + x / x_hi * plot_w

    def py(y: float) -> float:
        return _TOP + plot_h - y / y_hi * plot_h

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_W}" height="{_H}" '
        f'viewBox="0 0 {_W} {_H}" font-family="sans-serif" font-size="12">',
        f'<rect width="{_W}" height="{_H}" fill="white"/>',
        f'<text x="{_W / 2:.0f}" y="22" text-anchor="middle" font-size="14">{escape(title)}</text>',
    ]
    for x in x_ticks:
        parts.append(f'<line x1="{px(x):.1f}" y1="{_TOP}" x2="{px(x):.1f}" y2="{_TOP + plot_h}" '
                     'stroke="#eee"/>')
        parts.append(f'<text x="{px(x):.1f}" y="{_TOP + plot_h + 18}" '
                     f'text-anchor="middle">{x:g}</text>')
    for y in y_ticks:
        parts.append(f'<line x1="{_LEFT}" y1="{py(y):.1f}" x2="{_LEFT + plot_w}" y2="{py(y):.1f}" '
                     'stroke="#eee"/>')
        parts.append(f'<text x="{_LEFT - 8}" y="{py(y) + 4:.1f}" text-anchor="end">{y:g}</text>')
    parts += [
        f'<rect x="{_LEFT}" y="{_TOP}" width="{plot_w}" height="{plot_h}" fill="none" '
        'stroke="#333"/>',
        f'<text x="{_LEFT + plot_w / 2:.0f}" y="{_H - 18}" text-anchor="middle">'
        'GiB written to the host store</text>',
        f'<text x="18" y="{_TOP + plot_h / 2:.0f}" text-anchor="middle" '
        f'transform="rotate(-90 18 {_TOP + plot_h / 2:.0f})">host hit rate (%)</text>',
    ]
    for index, (policy, points) in enumerate(series.items()):
        colour = _COLOURS[index % len(_COLOURS)]
        if len(points) > 1:
            path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y, _ in points)
            parts.append(f'<polyline points="{path}" fill="none" stroke="{colour}" '
                         'stroke-width="1.5"/>')
        for x, y, label in points:
            parts.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="4" fill="{colour}">'
                         f'<title>{escape(label)}: {x:.3f} GiB, {y:.1f}%</title></circle>')
        legend_y = _TOP + 16 + index * 18
        parts.append(f'<circle cx="{_W - _RIGHT + 20}" cy="{legend_y - 4}" r="4" '
                     f'fill="{colour}"/>')
        parts.append(f'<text x="{_W - _RIGHT + 30}" y="{legend_y}">{escape(policy)} '
                     f'({len(points)})</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def png(results: Sequence[SimResult], title: str) -> bytes:
    """The sweep as PNG bytes, drawn by matplotlib (checked by :func:`plot_format`)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7.2, 4.4), dpi=100)
    for policy, points in _series(results).items():
        axes.plot([p[0] for p in points], [p[1] for p in points], marker="o",
                  label=f"{policy} ({len(points)})")
    axes.set_xlabel("GiB written to the host store")
    axes.set_ylabel("host hit rate (%)")
    axes.set_title(title)
    axes.grid(True, color="#eee")
    axes.legend()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    plt.close(figure)
    return buffer.getvalue()
