"""Make a workflow trace whose tasks grow: a Nextflow trace with its later half's memory scaled.

Users' programs change (a new version, larger inputs): a rule that used
400 MB uses 1,200 from one run on.  This writes a copy of a Nextflow trace
(``-with-trace``, raw units, comma- or tab-separated) in which every task
in the later half (by submission) uses ``--factor`` times the
memory it used (``rss``, ``peak_rss``); a task whose grown usage passes its
request gets a request of 1.25 times it (the user raised it, as one would),
so the figures count harp's sizing, not tasks no one could run.  The
shared traces are read, never changed, and the copy goes to a temporary
folder (or ``--out``): shared data is never committed.

    python bench/growth_trace.py [--trace PATH] [--factor 3] [--out FILE]
    harp replay "$(python bench/growth_trace.py)" --resource mem
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
from bench._traces import trace_file  # noqa: E402

DEFAULT_TRACE = "workflows/nf-core-chipseq.trace.csv.gz"
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", help=f"a Nextflow trace (default: {DEFAULT_TRACE} of the shared traces)")
    ap.add_argument("--factor", type=float, default=3.0, help="memory of the later half over the earlier (3)")
    ap.add_argument("--out", help="where to write it (default: a new temporary folder)")
    args = ap.parse_args(argv)
    if not args.factor > 0:
        print(f"error: --factor must be a positive number, not {args.factor}", file=sys.stderr)
        return 2
    src = trace_file("growth_trace", DEFAULT_TRACE, args.trace)
    opener = gzip.open if src.suffix == ".gz" else open
    with opener(src, "rt", newline="") as fh:  # type: ignore[operator]
        text = fh.read()
    dialect = "excel-tab" if "\t" in text.split("\n", 1)[0] else "excel"
    reader = csv.DictReader(io.StringIO(text), dialect=dialect)
    try:
        rows, grown, raised = grow(list(reader), args.factor)
    except ValueError as exc:
        print(f"error: {src}: {exc}", file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="harp-growth-")) / "growth.trace.csv"
    with open(out, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=reader.fieldnames or [], dialect=dialect)
        w.writeheader()
        w.writerows(rows)
    print(f"{grown} of {len(rows)} tasks grown x{args.factor:g}, {raised} requests raised", file=sys.stderr)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
