"""One self-contained HTML file with the report and its charts.

Admins mail this page around, so it must open offline in any browser and
never phone home: styles are inline, charts are inline SVG (``svg``), there
is no script at all, and a Content-Security-Policy forbids the page from
loading anything, so even a stray URL in a job name could not fetch.
"""

from __future__ import annotations

import functools
import math
from datetime import UTC, datetime
from html import escape
from typing import Any, Literal

from harpd.report import svg
from harpd.report.aggregate import GroupRow, Report
from harpd.report.fmt import compact, count, duration, is_zero_shown, mem_mb, metric, percent, when
from harpd.report.queue_figures import QueueFigures, QueuePolicy

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
USED, WASTE, ALLOC = "#2b8a3e", "#e8590c", "#1971c2"
HARP, USER = "#7048e8", "#868e96"
# natural log-axis ticks: seconds (1s .. 1 year) and MiB (1M .. 1P)
TIME_TICKS = (1, 10, 60, 600, 3600, 86400, 864000, 8640000)
MEM_TICKS = tuple(float(1024**e * m) for e in range(0, 3) for m in (1, 10, 100))

_STYLE = """
body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;color:#212529;margin:0;background:#f8f9fa}
main{max-width:1180px;margin:0 auto;padding:20px 24px 40px}
h1{font-size:22px;margin:0 0 4px}h3{font-size:14px;margin:14px 0 4px}p{font-size:14px}
h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #dee2e6;padding-bottom:4px}
.sub{color:#495057;font-size:13px}
.cards{display:flex;flex-wrap:wrap;gap:10px;margin-top:14px}
.card{background:#fff;border:1px solid #dee2e6;border-radius:6px;padding:8px 12px;min-width:120px}
.card .v{font-size:20px;font-weight:600}
.card .l{font-size:11px;color:#495057;text-transform:uppercase;letter-spacing:.03em}
.charts{display:flex;flex-wrap:wrap;gap:12px}
.charts svg{background:#fff;border:1px solid #dee2e6;border-radius:6px}
table{border-collapse:collapse;background:#fff;font-size:12.5px;margin-top:6px;max-width:100%}
.wide{overflow-x:auto;max-width:100%}
th,td{border:1px solid #dee2e6;padding:3px 7px;text-align:right;white-space:nowrap}
th{white-space:normal;vertical-align:bottom;min-width:3.5em}
th{background:#f1f3f5;font-weight:600}td:first-child,th:first-child{text-align:left}
tr.total td{font-weight:600;background:#f1f3f5}
.note{font-size:12px;color:#495057;max-width:900px}
.bad{color:#c92a2a}.good{color:#2b8a3e}
.missing{background:#fff;border:1px dashed #adb5bd;border-radius:6px;padding:10px 14px;width:340px;font-size:13px}
.missing b{display:block;margin-bottom:4px}
"""


def _e(s: object) -> str:
    return escape(str(s), quote=True)


def _card(label: str, value: str, cls: str = "") -> str:
    return f'<div class="card"><div class="v {cls}">{_e(value)}</div><div class="l">{_e(label)}</div></div>'


def _sign(v: float | None) -> str:
    """The colour of a saving: none for what reads as zero (never a red "-0.00")."""
    if v is None or is_zero_shown(compact(v)):
        return ""
    return "good" if v > 0 else "bad"


def _table(head: list[str], rows: list[list[str]], total: list[str] | None = None, cls: str = "") -> str:
    out = [
        f'<div class="wide"><table class="{cls}"><thead><tr>'
        + "".join(f"<th>{_e(h)}</th>" for h in head)
        + "</tr></thead><tbody>"
    ]
    for r in rows:
        out.append("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in r) + "</tr>")
    if total:
        out.append('<tr class="total">' + "".join(f"<td>{_e(c)}</td>" for c in total) + "</tr>")
    out.append("</tbody></table></div>")  # the wrapper scrolls a table wider than the page, never the page
    return "".join(out)


def _time_labels(starts: list[float], bin_s: float) -> list[str]:
    if bin_s < 86400:
        f = "%m-%d %H:00"
    elif bin_s < 28 * 86400:
        f = "%b %d"
    elif bin_s < 365 * 86400:
        f = "%Y-%m"
    else:
        f = "%Y"
    if bin_s >= 28 * 86400:  # calendar months, quarters and years: binned in UTC (aggregate._timeline)
        return [datetime.fromtimestamp(s, UTC).strftime(f) for s in starts]
    return [datetime.fromtimestamp(s).strftime(f) for s in starts]


def _bin_name(bin_s: float) -> str:
    return {
        3600: "hour",
        21600: "6 hours",
        86400: "day",
        604800: "week",
        2592000: "30 days",
        7862400: "quarter",
        31536000: "year",
    }.get(int(bin_s), f"{bin_s / 86400:g} days")


def _needs(r: Report, title: str, *columns: str) -> str:
    """In place of a panel the jobs cannot fill: what is missing and how to get it.

    An export such as ``sacct -o JobID,Account,...,Elapsed,State`` without
    TotalCPU or MaxRSS leaves usage unknown; an empty chart would read as
    "no waste", so the panel says which sacct fields would fill it.
    """
    missing = r.missing(*columns)
    if not missing:
        return ""
    fields = ",".join(missing)
    return (
        f'<div class="missing needs-{_e("-".join(m.lower() for m in missing))}"><b>{_e(title)}</b>'
        f"needs {_e(' and '.join(missing))}, which none of these jobs carry: add {_e(fields)} to "
        f"<code>sacct -o</code> (or <code>--format</code>) when exporting, then import again.</div>"
    )


def _distributions(r: Report) -> str:
    charts = []
    for key, title, formula, color, needs in (
        ("cpu_eff", "CPU efficiency", "TotalCPU / (elapsed x CPUs)", ALLOC, ("used_cpu_s", "used_time_s")),
        ("mem_eff", "Memory efficiency", "MaxRSS / ReqMem", USED, ("used_mem_mb", "req_mem_mb")),
        ("time_eff", "Time efficiency", "elapsed / time limit", HARP, ("used_time_s", "req_time_s")),
    ):
        missing = _needs(r, title, *needs)
        if missing:
            charts.append(missing)
            continue
        d = r.distributions[key]
        sub = f"{title}: median {percent(d['median'])}"
        ticks = [b.split("-")[0].rstrip("%").replace(">=", "\u2265") for b in d["bins"]]
        charts.append(
            svg.bar_chart(
                sub,
                ticks,
                d["counts"],
                svg.BarStyle(
                    color=color,
                    width=370,
                    cls=f"dist dist-{key}",
                    subtitle=f"{formula}; {d['n']:,} jobs",
                    x_label="efficiency, % (bins of 10)",
                    highlight=functools.partial(_last_bin, key, len(d["bins"])),
                ),
            )
        )
    return (
        '<div class="charts">' + "".join(charts) + "</div>"
        '<p class="note">Per-job values as seff/reportseff compute them. Orange: above 100% '
        "(more CPU time than cores x wall time, or memory beyond the request: usually an OOM kill).</p>"
    )


def _timeline(r: Report) -> str:
    """Use and waste per time bin; empty bins between sources are skipped (aggregate)."""
    t = r.timeline
    if not t["starts"]:
        return "<p>No jobs with an end time.</p>"
    labels = _time_labels(t["starts"], t["bin_s"])
    used_core = t["core_h_used"]
    waste_core = t["core_h_waste"]
    mem_used = t["mem_gbh_used"]
    mem_waste = [max(a - u, 0.0) for a, u in zip(t["mem_gbh_alloc"], t["mem_gbh_used"])]
    per = _bin_name(t["bin_s"])
    if r.missing("used_cpu_s"):
        # without TotalCPU the waste that can be shown is the time limits': reserved, never held
        core = svg.stacked_bars(
            f"Core-hours per {per}: held and reserved beyond the run",
            labels,
            [
                ("held (CPUs x elapsed)", t["core_h_alloc"], ALLOC),
                ("reserved, never held (time limit - elapsed)", t["core_h_limit_unused"], WASTE),
            ],
            width=560,
            unit=" core-h",
            cls="timeline timeline-core timeline-reserved",
        ) + _needs(r, "CPU time used per " + per, "used_cpu_s")
    else:
        core = svg.stacked_bars(
            f"Core-hours per {per}: used and wasted",
            labels,
            [("used", used_core, USED), ("wasted (allocated, not used)", waste_core, WASTE)],
            width=560,
            unit=" core-h",
            cls="timeline timeline-core",
        )
    mem = _needs(r, f"Memory GB-hours per {per}", "used_mem_mb", "req_mem_mb") or svg.stacked_bars(
        f"Memory GB-hours per {per}: used and wasted",
        labels,
        [("used (MaxRSS)", mem_used, USED), ("wasted", mem_waste, WASTE)],
        width=560,
        unit=" GB-h",
        cls="timeline timeline-mem",
    )
    gaps = t.get("gaps") or 0
    gap_note = (
        (
            f'<p class="note">{count(gaps)} empty {_e(per)}(s) between the jobs\' spans are left out '
            "(the sources cover different periods); the bars are in time order.</p>"
        )
        if gaps
        else ""
    )
    return '<div class="charts">' + core + mem + "</div>" + gap_note


def _wasters(r: Report, n: int = 12) -> str:
    mixed = len(r.sources) > 1

    def chart(
        metric: Literal["core_h_limit_unused", "core_h_waste", "mem_gbh_waste"],
        what: str,
        eff: Literal["time_eff", "cpu_eff", "mem_eff"],
        eff_label: str,
        unit: str,
        cls: str,
        **kw: Any,
    ) -> str:
        """The ``n`` groups with the most ``metric`` (unmeasured groups have no rank)."""
        known = sorted((g for g in r.groups if math.isfinite(g[metric]) and g[metric] > 0), key=lambda g: -g[metric])
        rows = known[:n]
        return svg.hbar_chart(
            f"Top {len(rows) or ''} {r.by}s by {what}".replace("  ", " "),
            [f"{g['key']} ({g.get('source')})" if mixed else str(g["key"]) for g in rows],
            [g[metric] for g in rows],
            note=[f"{eff_label} {percent(g[eff])}" for g in rows],
            unit=unit,
            width=560,
            cls=cls,
            **kw,
        )

    if r.missing("used_cpu_s"):  # without TotalCPU: the time limits' waste, and what would show the rest
        core = chart(
            "core_h_limit_unused",
            "reserved, never-held core-hours",
            "time_eff",
            "time eff",
            " core-h",
            "wasters wasters-core wasters-reserved",
        ) + _needs(r, f"Top {r.by}s by wasted core-hours", "used_cpu_s")
    else:
        core = chart("core_h_waste", "wasted core-hours", "cpu_eff", "CPU eff", " core-h", "wasters wasters-core")
    mem = _needs(r, f"Top {r.by}s by wasted memory GB-hours", "used_mem_mb", "req_mem_mb") or chart(
        "mem_gbh_waste", "wasted memory GB-hours", "mem_eff", "mem eff", " GB-h", "wasters wasters-mem", color="#f08c00"
    )
    return '<div class="charts">' + core + mem + "</div>"


def _calibration(r: Report) -> str:
    c = r.calibration
    charts = []
    rows = []
    for res, label, fmt, ticks, needs in (
        ("time", "time", duration, TIME_TICKS, ("used_time_s", "req_time_s")),
        ("mem", "memory", mem_mb, MEM_TICKS, ("used_mem_mb", "req_mem_mb")),
    ):
        h, u = c[res]["harp"], c[res]["user"]
        missing = _needs(r, f"{label.capitalize()}: requested vs used, and coverage", *needs)
        if missing:
            charts.append(missing)
            rows += [[label, who, "0", "-", "-"] for who in ("harp-sized", "user requests")]
            continue
        series = []
        if h["n"]:
            series.append(("harp-sized", [tuple(p) for p in h["points"]], HARP))
        if u["n"]:
            series.append(("user requests", [tuple(p) for p in u["points"]], USER))
        charts.append(
            svg.scatter_loglog(
                f"{label.capitalize()}: requested vs used",
                series,
                x_label=f"requested {label}",
                y_label=f"used {label}",
                fmt=fmt,
                tick_candidates=ticks,
                cls=f"calib calib-{res}",
            )
        )
        cov = []
        if h["deciles"]:
            cov.append(("harp-sized", [d["coverage"] for d in h["deciles"]], HARP))
        if u["deciles"]:
            cov.append(("user requests", [d["coverage"] for d in u["deciles"]], USER))
        charts.append(
            svg.coverage_chart(
                f"{label.capitalize()}: share of jobs the request covered",
                cov,
                c[res]["target"],
                cls=f"coverage coverage-{res}",
            )
        )
        for who, d in (("harp-sized", h), ("user requests", u)):
            rows.append(
                [
                    label,
                    who,
                    count(d["n"]),
                    percent(d["coverage"]),
                    "-" if d["median_ratio"] is None else f"{d['median_ratio']:.2f}",
                ]
            )
    return (
        '<div class="charts">'
        + "".join(charts)
        + "</div>"
        + _table(["resource", "requests by", "jobs", "covered", "median used / requested"], rows, cls="calib-table")
        + f'<p class="note">Covered: the job did not run out of that resource (TIMEOUT for time, OOM for memory). '
        f"harp sizes requests at the {c['time']['target'] * 100:.0f}% (time) and {c['mem']['target'] * 100:.0f}% "
        "(memory) quantiles, so its coverage should sit near the target line "
        "in every decile; dots far below the diagonal are over-requests. Cancelled jobs are left out.</p>"
    )


def _groups(r: Report, top: int) -> str:
    mixed = len(r.sources) > 1  # one source: the heading names it
    head = [
        r.by,
        *(["source"] if mixed else []),
        "jobs",
        "core-h alloc",
        "core-h used",
        "CPU eff",
        "GB-h alloc",
        "GB-h used",
        "mem eff",
        "time eff",
        "core-h reserved, never held",
        "GPU-h alloc",
        "TIMEOUT",
        "OOM",
        "other fail",
        "resubmits",
        "harp-sized",
    ]

    def row(g: GroupRow) -> list[str]:
        return [
            g["key"],
            *([str(g.get("source") or "")] if mixed else []),
            count(g["jobs"]),
            compact(g["core_h_alloc"]),
            compact(g["core_h_used"]),
            percent(g["cpu_eff"]),
            compact(g["mem_gbh_alloc"]),
            compact(g["mem_gbh_used"]),
            percent(g["mem_eff"]),
            percent(g["time_eff"]),
            compact(g["core_h_limit_unused"]),
            compact(g["gpu_h_alloc"]),
            count(g["timeout"]),
            count(g["oom"]),
            count(g["failed_other"]),
            count(g["resubmitted"]),
            count(g["harp_sized"]),
        ]

    shown = r.groups[:top] if top > 0 else r.groups
    more = (
        ""
        if len(shown) == len(r.groups)
        else f'<p class="note">{len(r.groups) - len(shown)} more {r.by}s in the CSV/JSON export.</p>'
    )
    total = row(r.total)
    total[0] = "TOTAL"
    if mixed:
        total[1] = ""
    return _table(head, [row(g) for g in shown], total, cls="groups") + more


def _outcomes(r: Report) -> str:
    f, rs = r.failures, r.resubmissions
    rows = [
        [label, count(f[k]["jobs"]), compact(f[k]["core_h"]), compact(f[k]["mem_gbh"])]
        for label, k in (("TIMEOUT", "timeout"), ("OUT_OF_MEMORY", "oom"), ("other (FAILED, NODE_FAIL)", "other"))
    ]
    out = _table(["failure cause", "jobs", "core-h lost", "GB-h lost"], rows, cls="failures")
    chain = ""
    if rs.get("chains"):
        chain = (
            f" harp recovery chains: {count(rs['chains'])} ({count(rs['chains_recovered'])} recovered, "
            f"{count(rs['chains_pending'])} in progress), {count(rs['attempts'])} attempts recorded."
        )
    if rs.get("extensions") or rs.get("resized"):
        chain += (
            f" Soft limits: {count(rs.get('extensions', 0))} extensions of {count(rs.get('jobs_extended', 0))} "
            f"running jobs before their limit, {count(rs.get('resized', 0))} pending jobs re-sized."
        )
    out += (
        f'<p class="note">Resubmissions: {count(rs["runs"])} runs with attempt &gt; 1 used {compact(rs["core_h"])} '
        f'core-h and {compact(rs["mem_gbh"])} GB-h; {count(rs["completed"])} completed.{_e(chain)} '
        f'Cancelled or preempted (not failures): {count(r.total["cancelled"])}.</p>'
    )
    return out


def _harp(r: Report) -> str:
    h = r.harp
    if not h.get("jobs"):
        return "<p>No harp-sized jobs in this window.</p>"
    fc = h["failures_caused"]
    rows = [
        [
            label,
            compact(h["asked"][k]),
            compact(h["allocated"][k]),
            compact(h["saved"][k]),
            compact(fc["cost"][k]),
            compact(h["net_saved"][k]),
        ]
        for label, k in (
            ("core-hours reserved (CPUs x time limit)", "core_h_reserved"),
            ("core-hours allocated", "core_h_alloc"),
            ("memory GB-hours allocated", "mem_gbh_alloc"),
        )
    ]
    rec = "recovery unknown" if fc["recovered"] is None else f"{count(fc['recovered'])} recovered"
    return (
        f"<p>{count(h['jobs'])} jobs ran with a request harp changed ({count(h['with_original'])} with the user's "
        f"original request on record); {count(h['completed'])} completed. "
        f"Failures harp caused (ran out of a resource harp had lowered): {count(fc['jobs'])} "
        f"(TIMEOUT {count(fc['timeout'])}, OOM {count(fc['oom'])}), {rec}.</p>"
        + _table(
            ["", "users asked", "harp allocated", "saved", "cost of failures harp caused", "net saved"],
            rows,
            cls="harp",
        )
        + '<p class="note">Reserved core-hours are what the time limits blocked for the scheduler; allocated '
        "core-hours and GB-hours are what the cluster held while jobs ran. A shorter time limit saves no compute "
        "by itself but lets the scheduler backfill.</p>"
    )


def _scoreboard(r: Report) -> str:
    sb = r.scoreboard
    out = []
    for table in sb.get("tables", []):
        rows, cols = table.get("rows") or [], table.get("columns") or []
        out.append(f"<h3>{_e(table.get('title', ''))}</h3>")
        if not rows:
            out.append(f"<p>{_e(table.get('note') or 'none')}</p>")
            continue
        fmts = table.get("formats") or {}
        body = [
            [("\u2605 " if x.get("champion") else "") + str(x.get("name")), str(x.get("resource", ""))]
            + [metric(x.get(c), fmts.get(c, "number")) for c in cols]
            for x in rows
        ]
        labels = table.get("labels") or {}
        out.append(_table(["model", "resource", *(labels.get(c, c) for c in cols)], body, cls="scoreboard"))
        if table.get("note"):
            out.append(f'<p class="note">{_e(table["note"])}</p>')
    out += [f'<p class="note">Note: {_e(n)}</p>' for n in sb.get("notes", [])]
    return "".join(out) or "<p>No models.</p>"


#: the queue panel's row labels (``harpd.evaluate.schedule_simulation.POLICIES``)
QUEUE_LABELS = {
    "users": "users' requests",
    "harp-hard": "harp, hard limits",
    "harp-soft": "harp, soft limits",
    "exact": "exact runtimes",
}


def _queue(q: QueueFigures) -> str:
    """Wait and slowdown per policy, side by side, from `harp replay --schedule`'s saved figures."""
    pols = [p for p in q.get("policies", []) if isinstance(p, dict)]
    labels = [QUEUE_LABELS.get(str(p.get("policy")), str(p.get("policy"))) for p in pols]

    def num(p: QueuePolicy, k: str) -> float:
        v = p.get(k)
        return float(v) if isinstance(v, (int, float)) else math.nan

    charts = svg.hbar_chart(
        "mean wait", labels, [num(p, "mean_wait_s") / 3600 for p in pols], color=HARP, unit=" h", cls="queue-wait"
    ) + svg.hbar_chart(
        "mean bounded slowdown", labels, [num(p, "mean_bounded_slowdown") for p in pols], color=USER, cls="queue-bsld"
    )

    def dur(v: float) -> str:  # seconds in full: policies often differ by a few percent
        return f"{v:,.0f} s" if math.isfinite(v) else "-"

    rows = [
        [
            lab,
            dur(num(p, "mean_wait_s")),
            dur(num(p, "p95_wait_s")),
            metric(p.get("mean_bounded_slowdown"), "number"),
            percent(p.get("utilization")),
            count(p.get("kills") or 0),
            count(p.get("extensions") or 0),
            count(p.get("delayed_starts") or 0),
        ]
        for lab, p in zip(labels, pols)
    ]
    gaps = q.get("gap_closed") or {}
    gap_text = "".join(
        f"<li>{_e(QUEUE_LABELS.get(name, name))} closes {percent(g.get('mean_wait_s'))} of the gap between the "
        f"users' requests and the exact runtimes in mean wait, {percent(g.get('mean_bounded_slowdown'))} in "
        "mean bounded slowdown</li>"
        for name, g in gaps.items()
        if isinstance(g, dict)
    )
    notes = "".join(f'<p class="note">Note: {_e(n)}</p>' for n in q.get("notes") or [])
    return (
        f"<p>Simulated queue of {_e(q.get('trace', 'the replayed trace'))}: {count(q.get('jobs') or 0)} jobs on "
        f"{count(q.get('procs') or 0)} processors, FCFS with EASY backfilling (<code>harp replay --schedule</code>)."
        "</p>"
        f'<div class="charts">{charts}</div>'
        + _table(
            [
                "policy",
                "mean wait",
                "p95 wait",
                "mean bounded slowdown",
                "utilization",
                "kills",
                "extensions",
                "starts delayed",
            ],
            rows,
            cls="queue",
        )
        + (f'<ul class="note">{gap_text}</ul>' if gap_text else "")
        + notes
        + '<p class="note">Wait runs from the first submission to the start of the run that completes; bounded '
        "slowdown is (wait + run) / max(run, 10 s). See docs/metrics.md, Queue.</p>"
    )


def _sources(r: Report) -> str:
    """The jobs' own sources (clusters, imported traces), after the store's path."""
    return f" ({_e(', '.join(r.sources))})" if r.sources else ""


def render(report: Report, top: int = 50) -> str:
    t = report.total
    title = f"harp report: {report.window.describe()}"
    net = report.harp.get("net_saved") or {}
    cards = "".join(
        [
            _card("jobs", count(t["jobs"])),
            _card("core-h allocated", compact(t["core_h_alloc"])),
            _card("core-h used", compact(t["core_h_used"])),
            _card("CPU efficiency", percent(t["cpu_eff"])),
            _card("memory efficiency", percent(t["mem_eff"])),
            _card("time efficiency", percent(t["time_eff"])),
            _card("GPU-h allocated", compact(t["gpu_h_alloc"])),
            _card("failures", count(t["timeout"] + t["oom"] + t["failed_other"]), "bad"),
            _card("core-h saved by harp (net)", compact(net.get("core_h_alloc")), _sign(net.get("core_h_alloc"))),
            _card("GB-h saved by harp (net)", compact(net.get("mem_gbh_alloc")), _sign(net.get("mem_gbh_alloc"))),
        ]
    )
    notes = "".join(f'<p class="note">Note: {_e(n)}</p>' for n in report.notes)
    # the simulated queue does not depend on the window: shown whenever a replay left it
    queue = f'<h2 id="queue">What harp does to the queue</h2>{_queue(report.queue)}' if report.queue else ""
    if not t["jobs"]:
        body = "<p>No finished jobs in this window.</p>" + notes + queue
    else:
        saved = ("harp", "What harp saved you" if report.personal else "What harp saved", _harp(report))
        sections = (
            *((saved,) if report.personal else ()),  # a user's own report leads with it
            ("efficiency", "Efficiency distributions", _distributions(report)),
            ("waste", "Waste over time", _timeline(report)),
            ("wasters", "Top wasters", _wasters(report)),
            ("calibration", "Calibration: requests against outcomes", _calibration(report)),
            ("groups", f"By {report.by}", _groups(report, top)),
            ("failures", "Failures and resubmissions", _outcomes(report)),
            *(() if report.personal else (saved, ("models", "Model scoreboard", _scoreboard(report)))),
        )
        body = (
            "".join(f'<h2 id="{a}">{_e(h)}</h2>{html}' for a, h, html in sections)
            + queue
            + notes
            + '<p class="note">Allocated = CPUs or ReqMem x elapsed; used = TotalCPU or MaxRSS x elapsed '
            "(peak memory, so an upper bound); reserved = x time limit. Efficiencies in tables are "
            "resource-weighted ratios of these sums.</p>"
        )
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{_e(title)}</title><style>{_STYLE}</style></head><body><main>"
        f"<h1>harp report</h1>"
        f'<div class="sub">Jobs that ended {_e(report.window.describe())}, by {_e(report.by)}, {_e(report.scope)}. '
        f"Source: {_e(report.source or 'store')}{_sources(report)}. "
        f"Generated {_e(when(report.generated_at, '%Y-%m-%d %H:%M'))}.</div>"
        f'<div class="cards">{cards}</div>'
        f"{body}"
        "</main></body></html>\n"
    )


def _last_bin(key: str, bins: int, i: int) -> bool:
    """The highlighted bar of an efficiency histogram: the top bin (jobs that used all they asked), not for time."""
    return key != "time_eff" and i == bins - 1
