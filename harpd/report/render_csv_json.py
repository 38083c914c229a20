"""Machine-readable reports: CSV for spreadsheets, JSON for everything.

CSV carries the group table only (one row per group, every metric, raw
numbers, no units in cells) because that is what goes into a spreadsheet.
Its headers are sacct's field names where one exists (``User``, ``Account``,
``Partition``: ``sacct -o`` spells them so), and harp's own figures keep
harp's names.  The all-jobs total is left out of the CSV: a total row among
the data rows is summed again by every spreadsheet formula and pivot that
takes the column, and a second section after a blank line breaks readers
that expect one table; the total (with its ratios of sums) is in the JSON.
JSON carries the whole report, including the sections the table summarises
in prose, with NaN written as null.
"""

from __future__ import annotations

import csv
import io
import json

from harpd.report.aggregate import METRIC_NAMES, SACCT_FIELDS, Report


def render_csv(report: Report) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    # the grouping as ``sacct -o`` names it (``signature`` is harp's own and keeps its name)
    w.writerow([SACCT_FIELDS.get(report.by, report.by), "source", *METRIC_NAMES])
    d = report.to_dict()
    for row in d["groups"]:
        w.writerow([row["key"], row.get("source") or "", *(_num(row[m]) for m in METRIC_NAMES)])
    return buf.getvalue()


def _num(v: str | float | None) -> str:
    if v is None:  # NaN in the report: an empty cell
        return ""
    if isinstance(v, str):  # never a metric's value, but the JSON row's type allows it
        return v
    if isinstance(v, bool):
        return str(int(v))
    if isinstance(v, int):
        return str(v)
    return f"{v:.10g}"


def render_json(report: Report) -> str:
    return json.dumps(report.to_dict(), indent=2, sort_keys=False, allow_nan=False) + "\n"
