"""Workflow tasks that grow: a Nextflow trace with its later half's memory scaled, and harp's OOM kills on it.

Users' programs change (a new version, larger inputs): a rule that used
400 MB uses 1,200 from one run on.  This writes a copy of a Nextflow trace
(``-with-trace``, raw units, comma- or tab-separated) in which every task
in the later half (by submission) uses ``--factor`` times the
memory it used (``rss``, ``peak_rss``); a task whose grown usage passes its
request gets a request of 1.25 times it (the user raised it, as one would),
so the figures count harp's sizing, not tasks no one could run.  The
shared traces are read, never changed, and the copy goes to a temporary
folder (or ``--out``): shared data is never committed.

Without ``--trace``/``--out`` it replays both shared nf-core traces grown
(chronological, decided at start) and prints harp's out-of-memory kills
against those before recency (#45).  With them it only writes the copy:

    python bench/growth_trace.py [--traces DIR] [--factor 3]
    harp replay "$(python bench/growth_trace.py --trace T.csv.gz)" --resource mem
"""

from __future__ import annotations

import argparse
import csv
import gzip
import io
import math
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from bench._traces import trace_file, traces_folder  # noqa: E402

TRACES = {"chipseq": "workflows/nf-core-chipseq.trace.csv.gz", "rnaseq": "workflows/nf-core-rnaseq.trace.csv.gz"}
#: harp's out-of-memory kills on each grown trace (x3) before recency (#45): the figure must be below
BEFORE = {"chipseq": 358, "rnaseq": 249}
SCALED = ("rss", "peak_rss")
HEADROOM = 1.25  # a grown task's new request over its grown peak, where its old request no longer held it


def _number(text: str) -> float | None:
    try:
        v = float(text)
    except ValueError:
        return None
    return v if math.isfinite(v) else None


def grow(rows: list[dict[str, str]], factor: float) -> tuple[list[dict[str, str]], int, int]:
    """The rows with the later half's memory scaled (the tasks submitted after the median submission).

    Returns (rows, tasks grown, requests raised).  Rows without a numeric
    ``submit`` are kept as they are.
    """
    submits = [s for s in (_number(r.get("submit", "")) for r in rows) if s is not None]
    if not submits:
        raise ValueError("no numeric submit column: use a trace in raw units (trace.raw = true)")
    middle = sorted(submits)[len(submits) // 2]  # the later half of the tasks, by submission
    grown = raised = 0
    out = []
    for r in rows:
        r = dict(r)
        s = _number(r.get("submit", ""))
        if s is not None and s > middle:
            grown += 1
            for col in SCALED:
                v = _number(r.get(col, ""))
                if v is not None:
                    r[col] = str(int(v * factor))
            peak, req = _number(r.get("peak_rss", "")), _number(r.get("memory", ""))
            if peak is not None and req is not None and req > 0 and peak >= req:
                r["memory"] = str(int(math.ceil(peak * HEADROOM)))
                raised += 1
        out.append(r)
    return out, grown, raised


def write_grown(src: Path, factor: float, out: Path) -> tuple[int, int, int]:
    """Write ``src`` grown by ``factor`` to ``out``: (tasks, tasks grown, requests raised); ValueError if unreadable."""
    opener = gzip.open if src.suffix == ".gz" else open
    with opener(src, "rt", newline="") as fh:  # type: ignore[operator]
        text = fh.read()
    dialect = "excel-tab" if "\t" in text.split("\n", 1)[0] else "excel"
    reader = csv.DictReader(io.StringIO(text), dialect=dialect)
    rows, grown, raised = grow(list(reader), factor)
    with open(out, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=reader.fieldnames or [], dialect=dialect)
        w.writeheader()
        w.writerows(rows)
    return len(rows), grown, raised


def replay(name: str, src: Path, factor: float) -> None:
    """The growth trace of ``src`` replayed chronologically (decided at start): harp's OOM kills, FIGURE lines."""
    from harpd.evaluate.workflow_replay import read_tasks, run_chronological

    with tempfile.TemporaryDirectory(prefix="harp-growth-") as tmp:
        out = Path(tmp) / "growth.trace.csv"
        n, grown, _ = write_grown(src, factor, out)
        res = run_chronological(read_tasks(out, "chronological"), "start")
    rows = res.rows
    best = min((k for k in rows if k not in ("harp", "request")), key=lambda k: rows[k].wastage_gbh)
    h, b = rows["harp"], rows[best]
    print(
        f"{name} grown x{factor:g} ({grown} of {n} tasks): harp {h.wastage_gbh:,.1f} GB·h, {h.failures} OOM kills; "
        f"best baseline {best} {b.wastage_gbh:,.1f} GB·h, {b.failures}"
    )
    before = BEFORE.get(name)
    if factor == 3.0 and before is not None:
        print(
            f"FIGURE growth_oom_kills_{name}: {h.failures} (target < {before}) {verdict(h.failures < before)} "
            f"harp's out-of-memory kills on the {name} trace whose later half uses 3x its memory, decided at start; "
            f"{before} before recency (#45)"
        )


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", help="one Nextflow trace to grow and write (default: replay both shared nf-core ones)")
    ap.add_argument("--traces", help="folder of the traces (default: $HARP_TRACES, else ../shared/traces)")
    ap.add_argument("--factor", type=float, default=3.0, help="memory of the later half over the earlier (3)")
    ap.add_argument("--out", help="write the grown trace here (default with --trace: a new temporary folder)")
    args = ap.parse_args(argv)
    if not args.factor > 0:
        print(f"growth_trace: --factor must be a positive number, not {args.factor}", file=sys.stderr)
        return 2
    if args.trace or args.out:
        src = trace_file("growth_trace", TRACES["chipseq"], args.trace, args.traces)
        out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="harp-growth-")) / "growth.trace.csv"
        try:
            n, grown, raised = write_grown(src, args.factor, out)
        except (ValueError, OSError, csv.Error) as exc:
            print(f"growth_trace: {src}: {exc}", file=sys.stderr)
            return 2
        print(f"{grown} of {n} tasks grown x{args.factor:g}, {raised} requests raised", file=sys.stderr)
        print(out)
        return 0
    folder = traces_folder("growth_trace", TRACES.values(), args.traces)
    for name, rel in TRACES.items():
        if not (folder / rel).is_file():
            print(f"FIGURE growth_oom_kills_{name}: nan (target < {BEFORE[name]}) FAIL trace missing")
            continue
        replay(name, folder / rel, args.factor)
    return 0


if __name__ == "__main__":
    sys.exit(main())
