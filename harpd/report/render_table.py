"""The terminal report: fits 100 columns, most important numbers first.

Admins read this over ssh in a default-width terminal, so the group table
keeps to the numbers that drive decisions (allocated against used, the three
efficiencies, failures) in compact units; every number and more is in the CSV
and JSON outputs.
"""

from __future__ import annotations

import textwrap
from typing import Any

from harpd.report.aggregate import Report
from harpd.report.fmt import compact, count, metric, percent, when

WIDTH = 100

# (title line 2, metric, formatter, width); title line 1 spans are added below
_COLUMNS: tuple[tuple[str, str, Any, int], ...] = (
    ("jobs", "jobs", compact, 6),
    ("alloc", "core_h_alloc", compact, 7),
    ("used", "core_h_used", compact, 7),
    ("cpu%", "cpu_eff", percent, 5),
    ("alloc", "mem_gbh_alloc", compact, 7),
    ("used", "mem_gbh_used", compact, 7),
    ("mem%", "mem_eff", percent, 5),
    ("time%", "time_eff", percent, 6),
    ("alloc", "gpu_h_alloc", compact, 6),
    ("T/O", "timeout", compact, 5),
    ("OOM", "oom", compact, 5),
    ("other", "failed_other", compact, 6),
)
_SPANS = (  # (label, first column index, last column index)
    ("core-hours", 1, 3),
    ("memory GB-h", 4, 6),
    ("GPU-h", 8, 8),
    ("failures", 9, 11),
)
_KEY_W = WIDTH - sum(w + 1 for *_, w in _COLUMNS) - 1


def _cut(s: str, w: int) -> str:
    return s if len(s) <= w else s[: w - 1] + "~"


def _row(key: str, values: dict[str, Any]) -> str:
    cells = [f"{_cut(key, _KEY_W):<{_KEY_W}}"]
    for _t, metric, f, w in _COLUMNS:
        cells.append(f"{f(values.get(metric)):>{w}}")
    return " ".join(cells).rstrip()


def _header(by: str) -> list[str]:
    # first line: centred span labels over their columns
    starts = []
    pos = _KEY_W + 1
    for *_, w in _COLUMNS:
        starts.append(pos)
        pos += w + 1
    line = [" "] * WIDTH
    for label, a, b in _SPANS:
        lo, hi = starts[a], starts[b] + _COLUMNS[b][3]
        text = label if len(label) <= hi - lo else label[: hi - lo]
        off = lo + max(0, (hi - lo - len(text)) // 2)
        line[off : off + len(text)] = text
    second = [f"{by:<{_KEY_W}}"] + [f"{t:>{w}}" for t, _m, _f, w in _COLUMNS]
    return ["".join(line).rstrip(), " ".join(second).rstrip()]


def group_table(report: Report, top: int) -> list[str]:
    lines = _header(report.by)
    lines.append("-" * WIDTH)
    rows = report.groups if top <= 0 else report.groups[:top]
    for r in rows:
        lines.append(_row(r["key"], r))
    rest = report.groups[len(rows) :]
    if rest:
        lines.append(
            f"... {len(rest)} more {report.by}s ({compact(sum(r['core_h_alloc'] for r in rest if r['core_h_alloc'] == r['core_h_alloc']))} core-h);"
            " --top 0 shows all, --format csv exports them"
        )
    lines.append("-" * WIDTH)
    lines.append(_row("TOTAL", report.total))
    return lines


def _failures(report: Report) -> list[str]:
    f = report.failures
    cancelled = report.total.get("cancelled", 0)
    out = ["Failures by cause                      jobs    core-h lost   mem GB-h lost"]
    for label, key in (("TIMEOUT", "timeout"), ("OUT_OF_MEMORY", "oom"), ("other (FAILED, NODE_FAIL)", "other")):
        out.append(
            f"  {label:<33} {compact(f[key]['jobs']):>7} {compact(f[key]['core_h']):>14} {compact(f[key]['mem_gbh']):>15}"
        )
    out.append(f"  {'cancelled/preempted (not failures)':<33} {compact(cancelled):>7}")
    return out


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
        out.append(f"  soft limits: {count(r.get('extensions', 0))} extension(s) of"
                   f" {count(r.get('jobs_extended', 0))} running job(s) before their limit,"
                   f" {count(r.get('resized', 0))} pending job(s) re-sized")
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
        f"  failures harp caused: {count(fc['jobs'])} (TIMEOUT {count(fc['timeout'])}, OOM {count(fc['oom'])}),"
        f" {rec}",
        f"  {'':<24} {'users asked':>12} {'harp gave':>11} {'saved':>10} {'failures cost':>14} {'net saved':>10}",
    ]
    for label, key in (
        ("core-h reserved (limit)", "core_h_reserved"),
        ("core-h allocated", "core_h_alloc"),
        ("memory GB-h allocated", "mem_gbh_alloc"),
    ):
        out.append(
            f"  {label:<24} {compact(h['asked'][key]):>12} {compact(h['allocated'][key]):>11}"
            f" {compact(h['saved'][key]):>10} {compact(fc['cost'][key]):>14} {compact(h['net_saved'][key]):>10}"
        )
    return out


def scoreboard_lines(report: Report) -> list[str]:
    sb = report.scoreboard
    out = ["Model scoreboard"]
    for table in sb.get("tables", []):
        rows, cols = table.get("rows") or [], table.get("columns") or []
        out.append(f"  {table.get('title', '')}")
        if not rows:
            out.append(f"    {table.get('note') or 'none'}")
            continue
        fmts = table.get("formats") or {}
        labels = table.get("labels") or {}
        head = "".join(f" {labels.get(c, c)[:10]:>10}" for c in cols)
        out.append((f"    {'model':<18} {'res':<5}" + head)[:WIDTH])
        for r in rows:
            name = ("*" if r.get("champion") else " ") + str(r.get("name", ""))
            line = f"    {_cut(name, 18):<18} {_cut(str(r.get('resource', '')), 5):<5}"
            line += "".join(f" {metric(r.get(c), fmts.get(c, 'number'))[:10]:>10}" for c in cols)
            out.append(line[:WIDTH])
        if table.get("note"):
            out += textwrap.wrap(table["note"], WIDTH, initial_indent="    ", subsequent_indent="    ")
    if any(r.get("champion") for t in sb.get("tables", []) for r in t.get("rows") or []):
        out.append("  * champion")
    for n in sb.get("notes", []):
        out += textwrap.wrap(f"note: {n}", WIDTH, initial_indent="  ", subsequent_indent="    ")
    if len(out) == 1:
        out.append("  no models")
    return out


def render(report: Report, top: int = 20) -> str:
    t = report.total
    lines = [
        *textwrap.wrap(f"harp report: jobs that ended {report.window.describe()}, by {report.by}, {report.scope}", WIDTH),
        *textwrap.wrap(f"{count(t['jobs'])} jobs from {report.source or 'the store'}; generated "
                       f"{when(report.generated_at, '%Y-%m-%d %H:%M')}", WIDTH),
        "",
    ]
    if not t["jobs"]:
        for n in report.notes:
            lines += textwrap.wrap(n, WIDTH)
        return "\n".join(lines).rstrip() + "\n"
    lines += group_table(report, top)
    lines += [
        "alloc = held by the cluster (CPUs or ReqMem x elapsed); used = TotalCPU or MaxRSS x elapsed;",
        "time% = elapsed / time limit; efficiencies are resource-weighted over each row's jobs.",
        "",
    ]
    lines += _failures(report) + [""] + _resubmissions(report) + [""] + _harp(report) + [""]
    lines += scoreboard_lines(report)
    if report.notes:
        lines.append("")
        for n in report.notes:
            lines += textwrap.wrap(f"note: {n}", WIDTH, subsequent_indent="  ")
    return "\n".join(lines).rstrip() + "\n"
