"""The report's time window: ``--since``/``--until`` (``-S``/``-E``) as people type them.

Admins think in "the last week" as often as in dates, and they type what
``sacct -S/-E`` taught them, so all of these are accepted: ISO dates or
datetimes (local time unless an offset is given), relative spans counted back
from now (``7d``, ``12h``, ``2w``), and sacct's forms (Slurm's man page,
TIME FORMATS): ``now[{+|-}count[seconds|minutes|hours|days|weeks]]``,
``today``/``midnight``, ``noon``, ``HH:MM[:SS]``, ``MMDD[YY]``,
``MM/DD[/YY]`` and ``MM.DD[.YY]``, each optionally followed by
``-HH:MM[:SS]``.  As with sacct's start and end times, a date without a year
or a time of day without a date is the latest such moment not after now.
Parsing lives apart from the CLI so the same rules apply wherever a window is
read.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from datetime import datetime

_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
# a span back from now: 7d, 12h, 2w, 5days; with a leading minus too (-5d, sacct's now-5days read
# the way people write it after -S; argparse would take it for an option, harpd.cli.main)
_RELATIVE = re.compile(
    r"^\s*-?\s*(\d+(?:\.\d+)?)\s*(s|secs?|seconds?|m|mins?|minutes?|h|hours?|d|days?|w|weeks?)\s*$", re.IGNORECASE
)
_OPEN = {"all", "ever", "beginning"}
# sacct: now[{+|-}count[seconds(default)|minutes|hours|days|weeks]]
_NOW_OFFSET = re.compile(
    r"^now\s*([+-])\s*(\d+)\s*(s|sec|secs|seconds?|min|mins|minutes?|h|hours?|d|days?|w|weeks?)?$", re.IGNORECASE
)
_CLOCK = r"(?:-(\d{1,2}):(\d{2})(?::(\d{2}))?)?"
# MMDD[YY], MM/DD[/YY], MM.DD[.YY], each with an optional -HH:MM[:SS]
_MONTH_DAY = (
    re.compile(r"^(\d{2})(\d{2})(\d{2})?" + _CLOCK + "$"),
    re.compile(r"^(\d{1,2})/(\d{1,2})(?:/(\d{2}|\d{4}))?" + _CLOCK + "$"),
    re.compile(r"^(\d{1,2})\.(\d{1,2})(?:\.(\d{2}|\d{4}))?" + _CLOCK + "$"),
)
_TIME_OF_DAY = re.compile(r"^(\d{1,2}):(\d{2})(?::(\d{2}))?\s*(am|pm)?$", re.IGNORECASE)
# sacct's named times of day (hour)
_NAMED_HOURS = {"today": 0, "midnight": 0, "noon": 12, "elevenses": 11, "fika": 15, "teatime": 16}
FORMS = (
    "an ISO date (2024-05-01, 2024-05-01T08:00), a span back from now (30m, 12h, 7d, -5d, 2w), "
    "sacct's forms (now-7days, now-2hours, today, midnight, noon, 08:00, 0501, 05/01/24), or 'all'"
)


@dataclass(frozen=True, slots=True)
class Window:
    """Jobs that ended in ``[since, until)``; ``None`` leaves that side open."""

    since: float | None
    until: float | None

    def describe(self) -> str:
        """'between A and B', 'since A', 'before B' or 'at any time' (local time)."""

        def fmt(t: float) -> str:
            return datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M")

        if self.since is not None and self.until is not None:
            return f"between {fmt(self.since)} and {fmt(self.until)}"
        if self.since is not None:
            return f"since {fmt(self.since)}"
        if self.until is not None:
            return f"before {fmt(self.until)}"
        return "at any time"


def parse_when(text: str, now: float | None = None, *, option: str = "--since") -> float | None:
    """Epoch seconds for ``text``; ``None`` for an open end (``all``).

    Raises ValueError with the one line the user should read.
    """
    now = time.time() if now is None else now
    t = text.strip()
    if not t:
        raise ValueError(f"{option}: empty value; give {FORMS}")
    if t.lower() in _OPEN:
        return None
    try:
        when = _parse(t, now)
    except (ValueError, OverflowError, OSError):
        when = None
    if when is None:
        raise ValueError(f"{option}: cannot read {text!r}; give {FORMS}")
    try:  # a span so long it leaves the calendar (99999999d) is no time at all
        datetime.fromtimestamp(when)
    except (ValueError, OverflowError, OSError):
        raise ValueError(
            f"{option} {text}: lies outside the calendar (before year 1 or after 9999); "
            "give a shorter span, or 'all' for no limit"
        ) from None
    return when


def _parse(t: str, now: float) -> float | None:
    """Epoch seconds for one non-empty, non-open value; None when no form matches."""
    low = t.lower()
    if low == "now":
        return now
    m = _RELATIVE.match(t)
    if m:
        return now - float(m.group(1)) * _UNIT_S[m.group(2)[0].lower()]
    m = _NOW_OFFSET.match(low)
    if m:
        sign = 1 if m.group(1) == "+" else -1
        unit = (m.group(3) or "s")[0]
        return now + sign * int(m.group(2)) * _UNIT_S[unit]
    today = datetime.fromtimestamp(now).replace(hour=0, minute=0, second=0, microsecond=0)
    if low in _NAMED_HOURS:
        return _not_after(today.replace(hour=_NAMED_HOURS[low]), now, days=1)
    m = _TIME_OF_DAY.match(t)
    if m:
        hour = int(m.group(1))
        if m.group(4):
            if not 1 <= hour <= 12:
                return None
            hour = hour % 12 + (12 if m.group(4).lower() == "pm" else 0)
        at = today.replace(hour=hour, minute=int(m.group(2)), second=int(m.group(3) or 0))
        return _not_after(at, now, days=1)
    for form in _MONTH_DAY:
        m = form.match(t)
        if m:
            month, day, year, hh, mm, ss = m.groups()
            y = today.year if year is None else int(year) + (2000 if len(year) == 2 else 0)
            at = datetime(y, int(month), int(day), int(hh or 0), int(mm or 0), int(ss or 0))
            if year is None and at.timestamp() > now:  # no year: the latest such date not after now
                at = at.replace(year=y - 1)
            return at.timestamp()
    try:
        dt = datetime.fromisoformat(t.replace("Z", "+00:00") if t.endswith(("Z", "z")) else t)
    except ValueError:
        return None
    return dt.timestamp()


def _not_after(at: datetime, now: float, *, days: int) -> float:
    """``at``, or ``days`` earlier when ``at`` is still to come (sacct reads times as past)."""
    ts = at.timestamp()
    return ts - days * 86400 if ts > now else ts


def parse_window(since: str | None, until: str | None, default_days: int, now: float | None = None) -> Window:
    """The window from the two options; default: the last ``default_days`` days."""
    now = time.time() if now is None else now
    s = parse_when(since, now, option="--since") if since is not None else now - default_days * 86400.0
    u = parse_when(until, now, option="--until") if until is not None else None
    if s is not None and u is not None and s >= u:
        raise ValueError(
            f"--since ({datetime.fromtimestamp(s):%Y-%m-%d %H:%M}) is not before --until "
            f"({datetime.fromtimestamp(u):%Y-%m-%d %H:%M}); swap them or widen the window"
        )
    return Window(s, u)
