"""How long ``Store.insert_jobs`` takes to load 1,000,000 job records (target < 30 s).

The import budget is 60 s for 1M records *including parsing*; the store gets
half of it.  Records are built before the clock starts (parsing is the
readers' figure), then loaded into a fresh store on disk with the default
batch size, then loaded again to time the idempotent re-import (all upserts).
Also prints ``job_columns`` and ``iter_jobs`` over the whole table, which the
reports and training depend on.

    python bench/store_insert.py [--n 1000000] [--dir DIR]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harpd.records import JobRecord, Outcome
from harpd.store import Store

TARGET_S = 30.0
OUTCOMES = [Outcome.COMPLETED] * 8 + [Outcome.TIMEOUT, Outcome.OOM]


def records(n: int) -> list[JobRecord]:
    out = []
    for i in range(n):
        out.append(
            JobRecord(
                job_id=str(1_000_000 + i),
                source="bench",
                user=f"user{i % 150:03d}",
                account=f"proj{i % 20:02d}",
                group="users",
                partition="cpu" if i % 5 else "gpu",
                job_name=f"job{i % 3000}",
                signature=f"python run_{i % 3000}.py",
                submit_time=1.7e9 + 30.0 * i,
                start_time=1.7e9 + 30.0 * i + 60,
                end_time=1.7e9 + 30.0 * i + 3660,
                outcome=OUTCOMES[i % 10],
                state="COMPLETED",
                exit_code=0,
                req_time_s=7200.0,
                req_mem_mb=8192.0,
                req_cpus=8,
                req_nodes=1,
                req_gpus=0 if i % 5 else 1,
                alloc_cpus=8,
                alloc_nodes=1,
                alloc_gpus=0,
                used_time_s=3600.0 + i % 977,
                used_mem_mb=1000.0 + i % 4001,
                used_cpu_s=20000.0,
                censored_time=i % 10 == 8,
                censored_mem=i % 10 == 9,
            )
        )
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--dir", help="where to put the store (default: a temp dir)")
    args = ap.parse_args()
    recs = records(args.n)
    with tempfile.TemporaryDirectory(dir=args.dir) as d:
        store = Store.open(Path(d) / "bench.db")
        t = time.perf_counter()
        n = store.insert_jobs(recs)
        first = time.perf_counter() - t
        t = time.perf_counter()
        store.insert_jobs(recs)
        again = time.perf_counter() - t
        assert store.count_jobs(finished_only=False) == args.n == n
        t = time.perf_counter()
        cols = store.job_columns(["user", "req_time_s", "used_time_s", "censored_time", "submit_time"])
        colt = time.perf_counter() - t
        assert len(cols["user"]) == args.n
        t = time.perf_counter()
        k = sum(1 for _ in store.iter_jobs(finished_only=False, order=None))
        itert = time.perf_counter() - t
        assert k == args.n
        store.close()
    scale = 1_000_000 / args.n
    print(f"insert {args.n} records: {first:.1f} s ({args.n / first:,.0f}/s)")
    print(f"re-insert (upsert, idempotent): {again:.1f} s")
    print(f"job_columns (5 columns): {colt:.1f} s; iter_jobs: {itert:.1f} s")
    per_million = first * scale
    verdict = "PASS" if per_million < TARGET_S else "FAIL"
    print(f"FIGURE store_insert: {per_million:.1f} s per 1M records (target < {TARGET_S:g}) {verdict}")
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
