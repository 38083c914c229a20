"""Machine-readable reports: CSV for spreadsheets, JSON for everything.

CSV carries the group table only (one row per group plus TOTAL, every metric,
raw numbers, no units in cells) because that is what goes into a
spreadsheet; JSON carries the whole report, including the sections the table
summarises in prose, with NaN written as null.
"""

from __future__ import annotations

import csv
import io
import json

from harpd.report.aggregate import METRIC_NAMES, Report


def render_csv(report: Report) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow([report.by, *METRIC_NAMES])
    d = report.to_dict()
    for row in [*d["groups"], d["total"]]:
        w.writerow([row["key"], *("" if row[m] is None else _num(row[m]) for m in METRIC_NAMES)])
    return buf.getvalue()


def _num(v: float | int) -> str:
    if isinstance(v, bool):
        return str(int(v))
    if isinstance(v, int):
        return str(v)
    return f"{v:.10g}"


def render_json(report: Report) -> str:
    return json.dumps(report.to_dict(), indent=2, sort_keys=False, allow_nan=False) + "\n"
