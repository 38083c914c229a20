"""Small SVG chart builders for the HTML report: bars, stacked bars, scatter.

The HTML report must open anywhere, offline, from a mail attachment, so the
charts are plain inline SVG written here: no JavaScript, no stylesheet or
font downloads.  Hover details use SVG ``<title>`` elements, which every
browser shows as a tooltip without scripts.  Each builder returns one
``<svg>`` string with explicit width, height and viewBox so it has a size
even before CSS applies.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape

from harpd.report.fmt import compact

FONT = "font-family:system-ui,-apple-system,'Segoe UI',Roboto,sans-serif"
GRID = "#e9ecef"
AXIS = "#868e96"
TEXT = "#343a40"


def _e(s: object) -> str:
    return escape(str(s), quote=True)


def nice_ticks(hi: float, n: int = 5) -> list[float]:
    """0..hi in 1/2/5 x 10^k steps (at least [0, something])."""
    if not math.isfinite(hi) or hi <= 0:
        return [0.0, 1.0]
    raw = hi / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    top = math.ceil(hi / step - 1e-9) * step
    k = int(round(top / step))
    return [i * step for i in range(k + 1)]


def tick_labels(ticks: Sequence[float]) -> list[str]:
    """The ticks' labels, compact where that tells them apart, else with the digits that do
    (ticks of 0.0025 would all read "0.00" compactly)."""
    labels = [compact(t) for t in ticks]
    if len(set(labels)) == len(labels):
        return labels
    for digits in range(1, 10):
        labels = [f"{t:.{digits}f}".rstrip("0").rstrip(".") if t else "0" for t in ticks]
        if all(abs(float(x) - t) <= 1e-9 * max(1.0, abs(t)) for x, t in zip(labels, ticks)):  # exact, so distinct
            return labels
    return [f"{t:g}" for t in ticks]


def log_ticks(lo: float, hi: float, candidates: Sequence[float] | None = None) -> list[float]:
    """Ticks spanning [lo, hi] on a log axis: powers of ten, or the given
    ``candidates`` (natural units such as 1m, 1h, 1d) with one beyond each end."""
    if candidates:
        c = sorted(float(t) for t in candidates)
        while c[0] > lo:
            c.insert(0, c[0] / 10)
        while c[-1] < hi:
            c.append(c[-1] * 10)
        a = max(i for i, t in enumerate(c) if t <= lo)
        b = min(i for i, t in enumerate(c) if t >= hi)
        return c[a : max(b, a + 1) + 1]
    a, b = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    if b == a:
        b = a + 1
    return [10.0**e for e in range(a, b + 1)]


def _open(width: int, height: int, title: str, cls: str) -> list[str]:
    return [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart {cls}" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{_e(title)}" style="{FONT}">',
        f"<title>{_e(title)}</title>",
        f'<text x="8" y="16" font-size="13" font-weight="600" fill="{TEXT}">{_e(title)}</text>',
    ]


def _empty(width: int, height: int, title: str, cls: str, why: str) -> str:
    parts = _open(width, height, title, cls)
    parts.append(
        f'<text x="{width / 2:.0f}" y="{height / 2:.0f}" font-size="12" fill="{AXIS}" '
        f'text-anchor="middle">{_e(why)}</text>'
    )
    parts.append("</svg>")
    return "".join(parts)


@dataclass(frozen=True, slots=True)
class BarStyle:
    """How ``bar_chart`` draws: size, colours, axis words, CSS class; ``highlight(i)``: bar i in its own colour."""

    color: str = "#1971c2"
    width: int = 340
    height: int = 220
    y_label: str = "jobs"
    highlight: Callable[[int], bool] | None = None
    highlight_color: str = "#e8590c"
    subtitle: str = ""
    x_label: str = ""
    cls: str = "bars"


def bar_chart(title: str, labels: Sequence[str], values: Sequence[float], style: BarStyle | None = None) -> str:
    """Vertical bars over categories (efficiency histograms)."""
    style = style or BarStyle()
    color, width, height, y_label = style.color, style.width, style.height, style.y_label
    highlight, highlight_color, subtitle, x_label, cls = (
        style.highlight,
        style.highlight_color,
        style.subtitle,
        style.x_label,
        style.cls,
    )
    if not values or sum(values) <= 0:
        return _empty(width, height, title, cls, "no jobs with this value")
    left, right, top, bottom = 44, 8, 42 if subtitle else 28, 40
    pw, ph = width - left - right, height - top - bottom
    ticks = nice_ticks(max(values))
    ymax = ticks[-1]
    parts = _open(width, height, title, cls)
    if subtitle:
        parts.append(f'<text x="8" y="31" font-size="11" fill="{AXIS}">{_e(subtitle)}</text>')
    for t, label in zip(ticks, tick_labels(ticks)):
        y = top + ph - ph * t / ymax
        parts.append(f'<line x1="{left}" x2="{left + pw}" y1="{y:.1f}" y2="{y:.1f}" stroke="{GRID}"/>')
        parts.append(
            f'<text x="{left - 4}" y="{y + 4:.1f}" font-size="10" fill="{AXIS}" text-anchor="end">{label}</text>'
        )
    bw = pw / len(values)
    for i, (lab, v) in enumerate(zip(labels, values)):
        h = ph * v / ymax
        x = left + i * bw
        c = highlight_color if highlight and highlight(i) else color
        parts.append(
            f'<rect class="bar" x="{x + 1:.1f}" y="{top + ph - h:.1f}" width="{max(bw - 2, 1):.1f}" '
            f'height="{max(h, 0):.1f}" fill="{c}">'
            f"<title>{_e(lab)}: {v:,.0f} {y_label}</title></rect>"
        )
        if i % max(1, len(values) // 6) == 0 or i == len(values) - 1:
            parts.append(
                f'<text x="{x + bw / 2:.1f}" y="{top + ph + 13}" font-size="9" fill="{AXIS}" '
                f'text-anchor="middle">{_e(lab)}</text>'
            )
    parts.append(f'<line x1="{left}" x2="{left + pw}" y1="{top + ph}" y2="{top + ph}" stroke="{AXIS}"/>')
    if x_label:
        parts.append(
            f'<text x="{left + pw / 2:.0f}" y="{height - 6}" font-size="10" fill="{AXIS}" '
            f'text-anchor="middle">{_e(x_label)}</text>'
        )
    parts.append(
        f'<text x="12" y="{top + ph / 2:.0f}" font-size="10" fill="{AXIS}" text-anchor="middle" '
        f'transform="rotate(-90 12 {top + ph / 2:.0f})">{_e(y_label)}</text>'
    )
    parts.append("</svg>")
    return "".join(parts)


def stacked_bars(
    title: str,
    labels: Sequence[str],
    series: Sequence[tuple[str, Sequence[float], str]],
    *,
    width: int = 700,
    height: int = 260,
    unit: str = "",
    cls: str = "stacked",
) -> str:
    """Bars over time, each split into stacked parts (used + wasted = allocated).
    Unknown (NaN) parts draw as nothing."""
    series = [(name, [v if math.isfinite(v) and v > 0 else 0.0 for v in vals], c) for name, vals, c in series]
    n = len(labels)
    totals = [sum(s[1][i] for s in series) for i in range(n)]
    if n == 0 or max(totals, default=0) <= 0:
        return _empty(width, height, title, cls, "nothing measured in this window")
    left, right, top, bottom = 54, 10, 40, 34
    pw, ph = width - left - right, height - top - bottom
    ticks = nice_ticks(max(totals))
    ymax = ticks[-1]
    parts = _open(width, height, title, cls)
    lx = 8
    for name, _vals, color in series:  # legend
        parts.append(f'<rect x="{lx}" y="24" width="10" height="10" fill="{color}"/>')
        parts.append(f'<text x="{lx + 14}" y="33" font-size="11" fill="{TEXT}">{_e(name)}</text>')
        lx += 24 + 7 * len(name)
    for t, label in zip(ticks, tick_labels(ticks)):
        y = top + ph - ph * t / ymax
        parts.append(f'<line x1="{left}" x2="{left + pw}" y1="{y:.1f}" y2="{y:.1f}" stroke="{GRID}"/>')
        parts.append(
            f'<text x="{left - 4}" y="{y + 4:.1f}" font-size="10" fill="{AXIS}" text-anchor="end">{label}</text>'
        )
    bw = pw / n
    every = max(1, math.ceil(n / 8))
    for i in range(n):
        x = left + i * bw
        base = float(top + ph)
        tip = "; ".join(f"{name} {compact(vals[i])}{unit}" for name, vals, _c in series)
        for _name, vals, color in series:
            h = ph * max(vals[i], 0.0) / ymax
            base -= h
            parts.append(
                f'<rect class="bar" x="{x + 0.5:.1f}" y="{base:.1f}" width="{max(bw - 1, 0.5):.1f}" height="{h:.1f}" '
                f'fill="{color}">'
                f"<title>{_e(labels[i])}: {_e(tip)}</title></rect>"
            )
        if i % every == 0:
            parts.append(
                f'<text x="{x + bw / 2:.1f}" y="{top + ph + 14}" font-size="10" fill="{AXIS}" '
                f'text-anchor="middle">{_e(labels[i])}</text>'
            )
    parts.append(f'<line x1="{left}" x2="{left + pw}" y1="{top + ph}" y2="{top + ph}" stroke="{AXIS}"/>')
    if unit:
        parts.append(
            f'<text x="12" y="{top + ph / 2:.0f}" font-size="10" fill="{AXIS}" text-anchor="middle" '
            f'transform="rotate(-90 12 {top + ph / 2:.0f})">{_e(unit.strip())}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def hbar_chart(
    title: str,
    labels: Sequence[str],
    values: Sequence[float],
    *,
    note: Sequence[str] | None = None,
    color: str = "#e8590c",
    width: int = 460,
    bar_h: int = 18,
    unit: str = "",
    cls: str = "hbars",
) -> str:
    """Horizontal bars, largest first (top wasters); callers drop unknown values."""
    n = len(values)
    height = 40 + max(n, 1) * (bar_h + 4) + 10
    if n == 0 or not all(math.isfinite(v) for v in values) or max(values) <= 0:
        return _empty(width, 90, title, cls, "no measured waste in this window")
    left, right = 130, 190 if note else 70
    pw = width - left - right
    vmax = max(values)
    parts = _open(width, height, title, cls)
    for i, (lab, v) in enumerate(zip(labels, values)):
        y = 30 + i * (bar_h + 4)
        w = pw * v / vmax
        extra = f" ({note[i]})" if note else ""
        short = lab if len(lab) <= 18 else lab[:17] + "\u2026"
        parts.append(
            f'<text x="{left - 6}" y="{y + bar_h - 5}" font-size="11" fill="{TEXT}" '
            f'text-anchor="end">{_e(short)}</text>'
        )
        parts.append(
            f'<rect class="bar" x="{left}" y="{y}" width="{max(w, 1):.1f}" height="{bar_h}" fill="{color}">'
            f"<title>{_e(lab)}: {compact(v)}{_e(unit)}{_e(extra)}</title></rect>"
        )
        parts.append(
            f'<text x="{left + w + 5:.1f}" y="{y + bar_h - 5}" font-size="11" '
            f'fill="{TEXT}">{compact(v)}{_e(unit)}{_e(extra)}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def scatter_loglog(
    title: str,
    series: Sequence[tuple[str, Sequence[tuple[float, float, bool]], str]],
    *,
    x_label: str,
    y_label: str,
    fmt: Callable[[float], str] = compact,
    tick_candidates: Sequence[float] | None = None,
    width: int = 440,
    height: int = 340,
    cls: str = "scatter",
) -> str:
    """Requested (x) against used (y) on log axes with the y = x line.

    Points above the line used more than was asked; crosses mark jobs that
    ran out (TIMEOUT/OOM), whose use is only a lower bound.
    """
    pts = [(x, y) for _n, s, _c in series for x, y, _m in s if x > 0 and y > 0]
    if not pts:
        return _empty(width, height, title, cls, "no jobs with both a request and a measured use")
    lo = min(min(p[0], p[1]) for p in pts)
    hi = max(max(p[0], p[1]) for p in pts)
    ticks = log_ticks(lo, hi, tick_candidates)
    a, b = math.log10(ticks[0]), math.log10(ticks[-1])
    left, right, top, bottom = 52, 12, 44, 40
    pw, ph = width - left - right, height - top - bottom

    def px(v: float) -> float:
        return left + pw * (math.log10(v) - a) / (b - a)

    def py(v: float) -> float:
        return top + ph - ph * (math.log10(v) - a) / (b - a)

    parts = _open(width, height, title, cls)
    lx = 8
    for name, s, color in series:
        parts.append(f'<circle cx="{lx + 5}" cy="29" r="4" fill="{color}"/>')
        label = f"{name} ({len(s):,})"
        parts.append(f'<text x="{lx + 13}" y="33" font-size="11" fill="{TEXT}">{_e(label)}</text>')
        lx += 26 + 6 * len(label)
    parts.append(f'<text x="{lx}" y="33" font-size="11" fill="#c92a2a">\u00d7 ran out</text>')
    for t in ticks:
        parts.append(f'<line x1="{px(t):.1f}" x2="{px(t):.1f}" y1="{top}" y2="{top + ph}" stroke="{GRID}"/>')
        parts.append(f'<line x1="{left}" x2="{left + pw}" y1="{py(t):.1f}" y2="{py(t):.1f}" stroke="{GRID}"/>')
        parts.append(
            f'<text x="{px(t):.1f}" y="{top + ph + 13}" font-size="10" fill="{AXIS}" '
            f'text-anchor="middle">{_e(fmt(t))}</text>'
        )
        parts.append(
            f'<text x="{left - 4}" y="{py(t) + 4:.1f}" font-size="10" fill="{AXIS}" '
            f'text-anchor="end">{_e(fmt(t))}</text>'
        )
    parts.append(
        f'<line class="diagonal" x1="{px(ticks[0]):.1f}" y1="{py(ticks[0]):.1f}" x2="{px(ticks[-1]):.1f}" '
        f'y2="{py(ticks[-1]):.1f}" stroke="{TEXT}" stroke-dasharray="4 3"/>'
    )
    for _name, s, color in series:
        dots = []
        crosses = []
        for x, y, miss in s:
            if x <= 0 or y <= 0:
                continue
            if miss:
                crosses.append(f"M{px(x) - 3:.1f},{py(y) - 3:.1f}l6,6m0,-6l-6,6")
            else:
                dots.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="2"/>')
        parts.append(f'<g class="points" fill="{color}" fill-opacity="0.45">{"".join(dots)}</g>')
        if crosses:
            parts.append(
                f'<path class="misses" d="{"".join(crosses)}" stroke="#c92a2a" stroke-width="1.2" fill="none"/>'
            )
    parts.append(
        f'<text x="{left + pw / 2:.0f}" y="{height - 8}" font-size="11" fill="{AXIS}" '
        f'text-anchor="middle">{_e(x_label)}</text>'
    )
    parts.append(
        f'<text x="12" y="{top + ph / 2:.0f}" font-size="11" fill="{AXIS}" text-anchor="middle" '
        f'transform="rotate(-90 12 {top + ph / 2:.0f})">{_e(y_label)}</text>'
    )
    parts.append("</svg>")
    return "".join(parts)


def coverage_chart(
    title: str,
    series: Sequence[tuple[str, Sequence[float], str]],
    target: float,
    *,
    width: int = 440,
    height: int = 220,
    cls: str = "coverage",
) -> str:
    """Share of jobs whose request covered their use, per decile of the request,
    against the target (1 - alpha): a quantile forecast is calibrated when its
    bars sit on the target line."""
    if not any(len(s[1]) for s in series):
        return _empty(width, height, title, cls, "fewer than 20 jobs: no deciles")
    left, right, top, bottom = 40, 10, 40, 30
    pw, ph = width - left - right, height - top - bottom
    parts = _open(width, height, title, cls)
    lx = 8
    for name, _v, color in series:
        parts.append(f'<rect x="{lx}" y="24" width="10" height="10" fill="{color}"/>')
        parts.append(f'<text x="{lx + 14}" y="33" font-size="11" fill="{TEXT}">{_e(name)}</text>')
        lx += 24 + 7 * len(name)
    for t in (0.0, 0.25, 0.5, 0.75, 1.0):
        y = top + ph - ph * t
        parts.append(f'<line x1="{left}" x2="{left + pw}" y1="{y:.1f}" y2="{y:.1f}" stroke="{GRID}"/>')
        parts.append(
            f'<text x="{left - 4}" y="{y + 4:.1f}" font-size="10" fill="{AXIS}" text-anchor="end">{t * 100:.0f}%</text>'
        )
    groups = 10
    gw = pw / groups
    k = max(1, len(series))
    for si, (name, vals, color) in enumerate(series):
        for i, v in enumerate(vals[:groups]):
            h = ph * max(0.0, min(v, 1.0))
            x = left + i * gw + 2 + si * (gw - 4) / k
            parts.append(
                f'<rect class="bar" x="{x:.1f}" y="{top + ph - h:.1f}" width="{max((gw - 4) / k - 1, 1):.1f}" '
                f'height="{h:.1f}" fill="{color}"><title>{_e(name)}, decile {i + 1}: {v * 100:.1f}% '
                'covered</title></rect>'
            )
    for i in range(groups):
        parts.append(
            f'<text x="{left + i * gw + gw / 2:.1f}" y="{top + ph + 13}" font-size="9" fill="{AXIS}" '
            f'text-anchor="middle">D{i + 1}</text>'
        )
    yt = top + ph - ph * target
    parts.append(
        f'<line class="target" x1="{left}" x2="{left + pw}" y1="{yt:.1f}" y2="{yt:.1f}" stroke="#c92a2a" '
        'stroke-dasharray="5 3"/>'
    )
    # legend entry for the line, clear of the bars
    parts.append(f'<line x1="{width - 92}" x2="{width - 74}" y1="29" y2="29" stroke="#c92a2a" stroke-dasharray="5 3"/>')
    parts.append(f'<text x="{width - 70}" y="33" font-size="11" fill="#c92a2a">target {target * 100:.0f}%</text>')
    parts.append(
        f'<text x="{left + pw / 2:.0f}" y="{height - 4}" font-size="10" fill="{AXIS}" text-anchor="middle">deciles '
        'of the request (small to large)</text>'
    )
    parts.append("</svg>")
    return "".join(parts)
