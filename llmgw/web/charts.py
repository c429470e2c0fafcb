"""Charts as inline SVG, drawn on the server: no script, nothing fetched.

Every label goes through `markupsafe.escape`; colours come from classes
in portal.css, so the Content-Security-Policy needs no inline style.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from markupsafe import Markup, escape

WIDTH, HEIGHT = 720, 220
_LEFT, _RIGHT, _TOP, _BOTTOM = 64, 12, 14, 30


def _nice_step(value: float, *, whole: bool) -> float:
    """A round step so that four of them reach at least ``value``: 1, 2, 2.5 or 5 times a power of ten
    (never a fraction when the values are ``whole`` numbers, like request counts)."""
    need = max(value, 1e-9) / 4
    magnitude = 10 ** math.floor(math.log10(need))
    for factor in (1, 2, 2.5, 5, 10):
        step = factor * magnitude
        if step >= need and (not whole or step >= 1 and float(step).is_integer()):
            return step
    return 10 * magnitude if not whole else max(1.0, math.ceil(10 * magnitude))


def bar_chart(
    points: Sequence[tuple[str, float]],
    *,
    title: str,
    fmt: Callable[[float], str] = lambda v: f"{v:g}",
    css: str = "bars",
    label_every: int | None = None,
    whole: bool = False,
) -> Markup:
    """A bar per (label, value), with the title as the SVG's accessible name.
    ``fmt`` writes the axis and each bar's tooltip; ``whole`` keeps the axis on whole numbers."""
    n = len(points)
    plot_w, plot_h = WIDTH - _LEFT - _RIGHT, HEIGHT - _TOP - _BOTTOM
    top = 4 * _nice_step(max((v for _, v in points), default=0.0), whole=whole)
    parts = [
        (f'<svg class="chart {escape(css)}" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
         f'aria-label="{escape(title)}" xmlns="http://www.w3.org/2000/svg">'),
        f"<title>{escape(title)}</title>",
    ]
    for i in range(5):  # grid lines and the axis's values
        value = top * i / 4
        y = _TOP + plot_h - plot_h * i / 4
        parts.append(f'<line class="grid" x1="{_LEFT}" x2="{WIDTH - _RIGHT}" y1="{y:.1f}" y2="{y:.1f}"/>')
        parts.append(f'<text class="axis" x="{_LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{escape(fmt(value))}</text>')
    if n:
        slot = plot_w / n
        bar_w = max(1.0, slot * 0.7)
        every = label_every or max(1, n // 10)
        for i, (label, value) in enumerate(points):
            h = plot_h * (value / top) if top else 0
            x = _LEFT + i * slot + (slot - bar_w) / 2
            y = _TOP + plot_h - h
            parts.append(
                f'<rect class="bar" x="{x:.1f}" y="{y:.1f}" width="{bar_w:.1f}" height="{h:.1f}">'
                f"<title>{escape(label)}: {escape(fmt(value))}</title></rect>"
            )
            if i % every == 0:
                cx = _LEFT + i * slot + slot / 2
                parts.append(f'<text class="axis" x="{cx:.1f}" y="{HEIGHT - 10}" text-anchor="middle">{escape(label)}</text>')
    parts.append("</svg>")
    return Markup("".join(parts))
