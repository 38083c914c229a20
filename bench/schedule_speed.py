"""The CTC-SP2 trace (77k jobs) through the EASY simulator for 4 policies: under 5 minutes.

Times ``harpd.simulate`` on the whole trace, four policies one after the
other, single-threaded, from reading the gzip SWF to the last summary:

* ``users``: the users' requested times, jobs killed at their request (not
  resubmitted);
* ``exact``: limits equal to the true runtimes (the bound no predictor beats);
* ``standin-hard`` and ``standin-soft``: **timing stand-ins, not harp**.  The
  limit is the mean runtime of the user's last two jobs that had ended (in
  the recorded trace) before this one was submitted, at least 60 s, at most
  the request (the request when the user has no history: Tsafrir et al.'s
  predictor).  Hard: a job reaching it is killed and resubmitted with twice
  the limit, never past the request.  Soft: a job reaching it is extended to
  its request, the simplest of Tsafrir et al.'s corrections.  At the request
  a job is killed for good, as under ``users``.

It prints each policy's queue figures and the total time.  The SWF is read
here with a minimal parser (columns 2 submit, 4 run time, 5 processors, 9
requested time, 12 user; the ``MaxProcs`` header), so this benchmark depends
on nothing but ``harpd.simulate``.  A job with no requested time gets its
runtime as its request (6 such jobs in CTC-SP2).

    python bench/schedule_speed.py [--trace PATH] [--procs N] [--quiet]
"""
# bench: slow
# bench: timeout=900

from __future__ import annotations

import argparse
import gzip
import heapq
import sys
import time
from collections import defaultdict, deque
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from harpd.simulate import LimitPolicy, Schedule, Workload, simulate  # noqa: E402

TRACE = REPO.parent / "shared" / "traces" / "CTC-SP2-1996-3.1-cln.swf.gz"
TARGET_S = 300.0
FLOOR_S = 60.0


class Trace:
    """The SWF columns the simulation needs, in file order."""

    def __init__(self, path: Path) -> None:
        opener = gzip.open if path.read_bytes()[:2] == b"\x1f\x8b" else open
        self.max_procs: int | None = None
        rows = []
        self.skipped = 0
        with opener(path, "rt", encoding="utf-8", errors="replace") as fh:  # type: ignore[operator]
            for line in fh:
                s = line.strip()
                if not s:
                    continue
                if s.startswith(";"):
                    key, _, val = s[1:].partition(":")
                    if key.strip() in ("MaxProcs", "MaxNodes") and val.split() and self.max_procs is None:
                        self.max_procs = int(float(val.split()[0]))
                    continue
                t = s.split()
                submit, wait, run, procs, req, user = (float(t[i]) for i in (1, 2, 3, 4, 8, 11))
                if procs < 1:
                    procs = float(t[7])
                if run < 0 or procs < 1 or submit < 0:
                    self.skipped += 1
                    continue
                rows.append((submit, run, procs, req if req > 0 else run, user, submit + max(wait, 0.0) + run))
        a = np.array(rows, dtype=np.float64).reshape(-1, 6)
        self.submit, self.runtime, self.request = a[:, 0], a[:, 1], a[:, 3]
        self.procs = a[:, 2].astype(np.int64)
        self.user = a[:, 4].astype(np.int64)
        self.trace_end = a[:, 5]


def user_prediction(tr: Trace) -> np.ndarray:
    """Mean runtime of the user's last two jobs ended (in the trace) before each submission."""
    pred = tr.request.copy()
    pending: dict[int, list[tuple[float, float]]] = defaultdict(list)
    ended: dict[int, deque[float]] = defaultdict(lambda: deque(maxlen=2))
    for j in np.argsort(tr.submit, kind="stable").tolist():
        u, t = int(tr.user[j]), float(tr.submit[j])
        heap = pending[u]
        while heap and heap[0][0] <= t:
            ended[u].append(heapq.heappop(heap)[1])
        if ended[u]:
            pred[j] = sum(ended[u]) / len(ended[u])
        heapq.heappush(heap, (float(tr.trace_end[j]), float(tr.runtime[j])))
    return np.minimum(tr.request, np.maximum(pred, FLOOR_S))


def policies(tr: Trace) -> list[LimitPolicy]:
    request = tr.request

    def double_to_request(j: int, limit: float, _events: int) -> float | None:
        cap = float(request[j])
        return None if limit >= cap else min(2.0 * limit, cap)

    def extend_to_request(j: int, limit: float, _events: int) -> float | None:
        cap = float(request[j])
        return None if limit >= cap else cap

    pred = user_prediction(tr)
    return [
        LimitPolicy(request, "hard", None, "users"),
        LimitPolicy(np.maximum(tr.runtime, 1.0), "hard", None, "exact"),
        LimitPolicy(pred, "hard", double_to_request, "standin-hard"),
        LimitPolicy(pred, "soft", extend_to_request, "standin-soft"),
    ]


class Bar:
    """A progress bar on stderr (only on a terminal)."""

    def __init__(self, label: str, enabled: bool) -> None:
        self.label, self.enabled = label, enabled and sys.stderr.isatty()

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled:
            return
        frac = done / total if total else 1.0
        fill = int(30 * frac)
        sys.stderr.write(f"\r{self.label:<13} [{'#' * fill}{'.' * (30 - fill)}] {frac:4.0%}")
        if done >= total:
            sys.stderr.write("\n")
        sys.stderr.flush()


def describe(s: Schedule, seconds: float) -> str:
    m = s.summary()
    return (
        f"{m.policy:<13} mean wait {m.mean_wait_s:9.0f} s  p95 wait {m.p95_wait_s:9.0f} s  "
        f"mean bsld {m.mean_bounded_slowdown:8.2f}  util {m.utilization:.3f} (useful {m.useful_utilization:.3f})  "
        f"kills {m.kills}  ext {m.extensions}  delayed {m.delayed_starts}  [{seconds:.1f} s]"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, default=TRACE, help="SWF trace (default: CTC-SP2 in ../shared/traces)")
    ap.add_argument("--procs", type=int, help="machine size (default: the MaxProcs/MaxNodes header)")
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    args = ap.parse_args()
    if not args.trace.exists():
        print(f"schedule_speed: trace {args.trace} not found; pass --trace", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    tr = Trace(args.trace)
    procs = args.procs or tr.max_procs
    if not procs:
        print(f"schedule_speed: {args.trace} has no MaxProcs header; pass --procs", file=sys.stderr)
        return 2
    work = Workload(tr.submit, tr.procs, tr.runtime)
    pols = policies(tr)
    print(f"trace {args.trace.name}: {len(work):,} jobs ({tr.skipped} skipped), {procs} processors, "
          f"read in {time.perf_counter() - t0:.1f} s")
    for pol in pols:
        t = time.perf_counter()
        sched = simulate(work, pol, procs, progress=Bar(pol.name, not args.quiet))
        print(describe(sched, time.perf_counter() - t), flush=True)
    rejected = sched.summary().rejected
    if rejected:
        print(f"{rejected} jobs wider than {procs} processors rejected")
    total = time.perf_counter() - t0
    ok = total < TARGET_S
    print(f"FIGURE schedule_speed_ctc_4_policies_s: {total:.1f} s (target < {TARGET_S:g}) {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
