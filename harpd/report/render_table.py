"""The terminal report: fits 100 columns, most important numbers first.

Admins read this over ssh in a default-width terminal, so the group table
keeps to the numbers that drive decisions (allocated against used, the three
efficiencies, failures) in compact units; every number and more is in the CSV
and JSON outputs.  Tables are laid out by tabulate (headers are wrapped,
never cut); only the group names, which users choose, are shortened (``~``)
when a table would not fit.
"""

from __future__ import annotations

import math
import textwrap
import threading
from collections.abc import Sequence
from typing import Any

import tabulate as tabulate_module
from tabulate import tabulate

from harpd.report.aggregate import GroupRow, Report
from harpd.report.fmt import compact, count, metric, percent, when
from harpd.report.gpu_memory import render_gpu_memory
from harpd.report.scoreboard import ScoreRow, ScoreTable

WIDTH = 100

# (header, metric, formatter), in output order
_COLUMNS: tuple[tuple[str, str, Any], ...] = (
    ("jobs", "jobs", compact),
    ("core-h\nalloc", "core_h_alloc", compact),
    ("core-h\nused", "core_h_used", compact),
    ("cpu%", "cpu_eff", percent),
    ("GB-h\nalloc", "mem_gbh_alloc", compact),
    ("GB-h\nused", "mem_gbh_used", compact),
    ("mem%", "mem_eff", percent),
    ("time%", "time_eff", percent),
    ("GPU-h\nalloc", "gpu_h_alloc", compact),
    ("T/O", "timeout", compact),
    ("OOM", "oom", compact),
    ("other\nfail", "failed_other", compact),
)
MIN_KEY_W = 8
# tabulate pads every header by MIN_PADDING (2) spaces on top of the column
# gap; at 13 columns that alone costs 26 of the terminal's 100.  It is a
# module setting, so it is changed only around our own calls (harpd may build
# two reports at once: the lock keeps them from restoring it under each other).
_PADDING_LOCK = threading.Lock()


def _cut(s: str, w: int) -> str:
    return s if len(s) <= w else s[: w - 1] + "~"


def table(
    headers: Sequence[str],
    rows: Sequence[Sequence[Any]],
    *,
    left: int = 1,
    indent: str = "",
    cut: int | None = None,
    width: int = WIDTH,
) -> list[str]:
    """``rows`` (already formatted) under ``headers``: the first ``left`` columns
    left-aligned, the rest right-aligned.  When the table is wider than
    ``width``, column ``cut`` (a user-chosen name) is shortened to fit."""

    def lay(body: Sequence[Sequence[Any]]) -> list[str]:
        with _PADDING_LOCK:
            saved, tabulate_module.MIN_PADDING = tabulate_module.MIN_PADDING, 0
            try:
                text = tabulate(
                    [[str(c) for c in r] for r in body],
                    headers=list(headers),
                    tablefmt="simple",
                    disable_numparse=True,
                    colalign=["left"] * left + ["right"] * (len(headers) - left),
                )
            finally:
                tabulate_module.MIN_PADDING = saved
        return [indent + line.rstrip() for line in text.splitlines()]

    lines = lay(rows)
    over = max(len(x) for x in lines) - width
    if over > 0 and cut is not None and rows:
        w = max(max(len(str(r[cut])) for r in rows) - over, MIN_KEY_W)
        lines = lay([[_cut(str(c), w) if i == cut else c for i, c in enumerate(r)] for r in rows])
    return lines


def group_table(report: Report, top: int) -> list[str]:
    """The groups, largest first, then TOTAL under a rule; the source of each
    row is a column when the report mixes sources (else the heading names it)."""
    shown = report.groups if top <= 0 else report.groups[:top]
    mixed = len(report.sources) > 1
    head = [report.by, *(["source"] if mixed else []), *(t for t, _m, _f in _COLUMNS)]

    def cells(key: str, values: GroupRow) -> list[str]:
        src = [str(values.get("source") or "")] if mixed else []
        return [key, *src, *(f(values.get(m)) for _t, m, f in _COLUMNS)]

    lines = table(head, [cells(r["key"], r) for r in shown] + [cells("TOTAL", report.total)], left=1 + mixed, cut=0)
    total = lines.pop()
    rule = lines[head_lines(head)].replace(" ", "-")  # tabulate's header rule, joined into one line
    rest = report.groups[len(shown) :]
    if rest:
        alloc = sum(r["core_h_alloc"] for r in rest if not math.isnan(r["core_h_alloc"]))
        lines.append(
            f"... {len(rest)} more {report.by}s ({compact(alloc)} core-h); --top 0 shows all, --format csv exports them"
        )
    return [*lines, rule, total]


def head_lines(head: Sequence[str]) -> int:
    """How many lines tabulate's header takes (the rule follows them)."""
    return max(h.count("\n") for h in head) + 1


def _failures(report: Report) -> list[str]:
    f = report.failures
    cancelled = report.total.get("cancelled", 0)
    rows = [
        [label, compact(f[key]["jobs"]), compact(f[key]["core_h"]), compact(f[key]["mem_gbh"])]
        for label, key in (("TIMEOUT", "timeout"), ("OUT_OF_MEMORY", "oom"), ("other (FAILED, NODE_FAIL)", "other"))
    ]
    rows.append(["cancelled/preempted (not failures)", compact(cancelled), "", ""])
    return ["Failures by cause", *table(["cause", "jobs", "core-h lost", "mem GB-h lost"], rows, indent="  ")]


def _resubmissions(report: Report) -> list[str]:
    r = report.resubmissions
    out = [
        f"Resubmissions: {count(r['runs'])} run(s) with attempt > 1 used {compact(r['core_h'])} core-h"
        f" and {compact(r['mem_gbh'])} GB-h; {count(r['completed'])} completed"
    ]
    if r.get("chains"):
        out.append(
            f"  harp recovery chains: {count(r['chains'])} ({count(r['chains_recovered'])} recovered,"
            f" {count(r['chains_pending'])} in progress), {count(r['attempts'])} attempt(s) recorded"
        )
    if r.get("extensions") or r.get("resized"):
        out.append(
            f"  soft limits: {count(r.get('extensions', 0))} extension(s) of"
            f" {count(r.get('jobs_extended', 0))} running job(s) before their limit,"
            f" {count(r.get('resized', 0))} pending job(s) re-sized"
        )
    return out


def _harp(report: Report) -> list[str]:
    h = report.harp
    if not h.get("jobs"):
        return ["harp-sized jobs: none in this window"]
    fc = h["failures_caused"]
    rec = "recovery unknown" if fc["recovered"] is None else f"{count(fc['recovered'])} recovered"
    out = [
        f"harp-sized jobs: {count(h['jobs'])} ({count(h['with_original'])} with the user's original request"
        f" on record), {count(h['completed'])} completed",
        f"  failures harp caused: {count(fc['jobs'])} (TIMEOUT {count(fc['timeout'])}, OOM {count(fc['oom'])}), {rec}",
    ]
    rows = [
        [
            label,
            compact(h["asked"][key]),
            compact(h["allocated"][key]),
            compact(h["saved"][key]),
            compact(fc["cost"][key]),
            compact(h["net_saved"][key]),
        ]
        for label, key in (
            ("core-h reserved (limit)", "core_h_reserved"),
            ("core-h allocated", "core_h_alloc"),
            ("memory GB-h allocated", "mem_gbh_alloc"),
        )
    ]
    out += table(["", "users asked", "harp gave", "saved", "failures cost", "net saved"], rows, indent="  ")
    return out


def scoreboard_table(tab: ScoreTable, cols: list[str], rows: list[ScoreRow]) -> list[str]:
    """One scoreboard table: whole headers (wrapped at spaces), whole numbers."""
    fmts = tab.get("formats") or {}
    labels = tab.get("labels") or {}
    head = ["model", "res", *(textwrap.fill(labels.get(c, c.replace("_", " ")), 10) for c in cols)]
    body = [
        [
            ("*" if r.get("champion") else " ") + str(r.get("name", "")),
            str(r.get("resource", "")),
            *(metric(r.get(c), fmts.get(c, "number")) for c in cols),
        ]
        for r in rows
    ]
    return table(head, body, left=2, indent="    ", cut=0)


def scoreboard_lines(report: Report) -> list[str]:
    sb = report.scoreboard
    out = ["Model scoreboard"]
    for tab in sb.get("tables", []):
        rows, cols = tab.get("rows") or [], tab.get("columns") or []
        out.append(f"  {tab.get('title', '')}")
        if not rows:
            out.append(f"    {tab.get('note') or 'none'}")
            continue
        out += scoreboard_table(tab, cols, rows)
        if tab.get("note"):
            out += textwrap.wrap(tab["note"], WIDTH, initial_indent="    ", subsequent_indent="    ")
    if any(r.get("champion") for t in sb.get("tables", []) for r in t.get("rows") or []):
        out.append("  * champion")
    for n in sb.get("notes", []):
        out += textwrap.wrap(f"note: {n}", WIDTH, initial_indent="  ", subsequent_indent="    ")
    if len(out) == 1:
        out.append("  no models")
    return out


def render(report: Report, top: int = 20) -> str:
    t = report.total
    whose = "your jobs" if report.personal else "jobs"
    lines = [
        *textwrap.wrap(
            f"harp report: {whose} that ended {report.window.describe()}, by {report.by}, {report.scope}", WIDTH
        ),
        *textwrap.wrap(
            f"{count(t['jobs'])} jobs from {report.source or 'the store'}"
            f"{' (sources: ' + ', '.join(report.sources) + ')' if report.sources else ''}; generated "
            f"{when(report.generated_at, '%Y-%m-%d %H:%M')}",
            WIDTH,
        ),
        "",
    ]
    if not t["jobs"]:
        for n in report.notes:
            lines += textwrap.wrap(n, WIDTH)
        return "\n".join(lines).rstrip() + "\n"
    if report.personal:  # what the user came for first: what harp did with their jobs
        lines += ["What harp saved you", *_harp(report), ""]
    lines += group_table(report, top)
    lines += [
        "alloc = held by the cluster (CPUs or ReqMem x elapsed); used = TotalCPU or MaxRSS x elapsed;",
        "time% = elapsed / time limit; efficiencies are resource-weighted over each row's jobs.",
        "",
    ]
    lines += _failures(report) + [""] + _resubmissions(report)
    if not report.personal:
        lines += [""] + _harp(report) + [""] + scoreboard_lines(report)
    if report.gpu_memory:
        lines += ["", *render_gpu_memory(report.gpu_memory)]
    if report.notes:
        lines.append("")
        for n in report.notes:
            lines += textwrap.wrap(f"note: {n}", WIDTH, subsequent_indent="  ")
    return "\n".join(lines).rstrip() + "\n"
