"""Training on 1,000,000 job records: wall time (target < 2 min) and peak memory (< 2 GiB).

The records are the real traces (CTC, HPC2N, KTH, Cedar) repeated with the
users renamed per copy and the clock shifted, until there are a million:
real request/usage habits, a million rows.  A child process writes them to a
temporary store (not timed); then this process times exactly what the
daemon's retrain does for time: read the store, build features from
history, evaluate every candidate on the chronological hold-out, pick the
champion, refit and save all.  Peak memory is this process's maximum
resident set (ru_maxrss), so the store building is not in it.

    python bench/train_speed.py [--n 1000000] [--traces DIR]
"""
# bench: slow
# bench: timeout=1200

from __future__ import annotations

import argparse
import dataclasses
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from bench._traces import traces_folder  # noqa: E402

TRACES = (
    "HPC2N-2002-2.2-cln.swf.gz",
    "CTC-SP2-1996-3.1-cln.swf.gz",
    "KTH-SP2-1996-2.1-cln.swf.gz",
    "cedar-2021.sacct.psv.gz",
)
TARGET_S = 120.0
TARGET_GIB = 2.0


def records(n: int, folder: Path):
    from harpd.traces import read_trace

    base = []
    for name in TRACES:
        p = folder / name
        if p.exists():
            base.extend(r for r in read_trace(p) if r.submit_time is not None and r.req_time_s)
    if not base:
        raise SystemExit("train_speed: no usable jobs in the traces under " + str(folder))
    t0 = min(r.submit_time for r in base)
    span = max(r.submit_time for r in base) - t0 + 86400.0
    out = []
    copy = 0
    while len(out) < n:
        shift = copy * span
        for r in base:
            if len(out) >= n:
                break
            d = {
                "submit_time": r.submit_time + shift,
                "start_time": None if r.start_time is None else r.start_time + shift,
                "end_time": None if r.end_time is None else r.end_time + shift,
                "job_id": f"{r.job_id}.{copy}",  # the store's key is (source, job_id, attempt)
                "user": None if r.user is None else f"{r.user}.{copy}",
                "account": None if r.account is None else f"{r.account}.{copy}",
            }
            out.append(dataclasses.replace(r, **d))
        copy += 1
    out.sort(key=lambda r: r.submit_time)
    return out


def build_store(path: str, n: int, folder: Path) -> None:
    from harpd.store import Store

    recs = records(n, folder)
    st = Store.open(path)
    st.insert_jobs(recs)
    st.close()
    print(f"{len(recs)} records stored")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--traces", help="folder of the traces (default: $HARP_TRACES, else ../shared/traces)")
    ap.add_argument("--build-store", metavar="PATH", help=argparse.SUPPRESS)
    args = ap.parse_args()
    folder = traces_folder("train_speed", TRACES, args.traces)
    if args.build_store:
        build_store(args.build_store, args.n, folder)
        return 0
    from threadpoolctl import threadpool_limits

    from harpd.config import HarpSettings
    from harpd.store import Store
    from harpd.training.champions import train

    with tempfile.TemporaryDirectory() as d:
        db = str(Path(d) / "harp.db")
        t0 = time.perf_counter()
        subprocess.run(
            [sys.executable, __file__, "--n", str(args.n), "--traces", str(folder), "--build-store", db], check=True
        )
        print(f"store built in {time.perf_counter() - t0:.0f}s (not timed)")
        settings = HarpSettings(store={"path": db})
        st = Store.open(db)
        with threadpool_limits(2):
            t0 = time.perf_counter()
            res = train(st, settings, "time", models_dir=Path(d) / "models")
            wall = time.perf_counter() - t0
        st.close()
    peak_gib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (1024**2)
    print(f"{res.n_jobs} jobs used, champion {res.champion}; phases: {res.phases}")
    for m in res.models:
        sc = m["score"]
        if sc:
            print(f"  {m['name']:8} score {sc['score']:.3f} under {sc['under_rate']:.2%}")
    ok_t, ok_m = wall < TARGET_S, peak_gib < TARGET_GIB
    print(f"FIGURE train_1m_s: {wall:.1f} s (target < {TARGET_S:g}) {'PASS' if ok_t else 'FAIL'}")
    print(f"FIGURE train_1m_peak_gib: {peak_gib:.2f} GiB (target < {TARGET_GIB:g}) {'PASS' if ok_m else 'FAIL'}")
    return 0 if ok_t and ok_m else 1


if __name__ == "__main__":
    sys.exit(main())
