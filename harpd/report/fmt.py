"""Number formatting shared by the table and the HTML page.

Sums over a cluster span six orders of magnitude; a fixed-width compact form
(``45.6k``, ``1.2M``) keeps a 100-column table aligned and readable.  Every
renderer formats through here so the same number reads the same everywhere.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

_SUFFIXES = ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def compact(x: Any) -> str:
    """45600 -> '45.6k'; 7 -> '7'; 0.25 -> '0.25'; None/NaN -> '-'."""
    if x is None:
        return "-"
    f = float(x)
    if not math.isfinite(f):
        return "-"
    a = abs(f)
    for scale, suf in _SUFFIXES:
        if a >= scale * 0.9995:
            v = f / scale
            return f"{v:.1f}{suf}" if abs(v) < 100 else f"{v:.0f}{suf}"
    if a == 0:
        return "0"
    if a < 10 and f != int(f):
        s = f"{f:.2f}" if a < 1 else f"{f:.1f}"
    else:
        s = f"{f:.0f}"
    return s[1:] if s.startswith("-") and not s.strip("-0.") else s  # never "-0.00": a tiny loss reads as 0


def is_zero_shown(text: str) -> bool:
    """Whether a formatted number reads as zero ("0", "0.00"): neither a gain nor a loss to colour."""
    return any(c.isdigit() for c in text) and not text.strip("-0.")


def percent(x: Any) -> str:
    """0.273 -> '27%'; None/NaN -> '-'; tiny non-zero -> '<1%'."""
    if x is None:
        return "-"
    f = float(x)
    if not math.isfinite(f):
        return "-"
    if 0 < f < 0.005:
        return "<1%"
    return f"{f * 100:.0f}%"


def count(x: Any) -> str:
    """Exact integer with thousands separators (job counts in prose)."""
    return "-" if x is None else f"{int(x):,}"


def when(t: float | None, fmt: str = "%Y-%m-%d") -> str:
    return "-" if t is None else datetime.fromtimestamp(t).strftime(fmt)


def duration(seconds: float) -> str:
    """Axis labels for times: 30s, 10m, 2h, 3d (one unit, rounded)."""
    s = float(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size:
            v = s / size
            return f"{v:.0f}{unit}" if v >= 10 or v == int(v) else f"{v:.1f}{unit}"
    return f"{s:.0f}s" if s >= 1 or s == 0 else f"{s:.2g}s"


def mem_mb(mb: float) -> str:
    """Axis labels for memory given in MiB: 100M, 1.5G, 2T."""
    m = float(mb)
    for unit, size in (("T", 1024.0 * 1024), ("G", 1024.0)):
        if m >= size:
            v = m / size
            return f"{v:.0f}{unit}" if v >= 10 or v == int(v) else f"{v:.1f}{unit}"
    return f"{m:.0f}M" if m >= 1 else f"{m:.2f}M"


def metric(v: Any, kind: str) -> str:
    """A scoreboard cell: ``kind`` is count, percent, ratio or number."""
    if v is None or isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(float(v)):
        return "-" if not isinstance(v, str) else v
    if kind == "count":
        return compact(v)
    if kind == "percent":
        return f"{float(v) * 100:.1f}%"
    if kind == "ratio":
        return f"{float(v):.2f}"
    return f"{float(v):.3g}" if abs(float(v)) < 1e4 else compact(v)
