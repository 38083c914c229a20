"""How long `harp report` takes over a store of 1,000,000 jobs (target < 10 s).

Generates synthetic but plausible history (users with their own over-request
habits, timeouts, OOMs, GPU jobs, harp-sized jobs with submission records and
resubmission chains) into a temporary store through ``Store.insert_jobs``,
then times the whole ``harp report`` command as a process (start, store read,
aggregation, rendering) for each output format.  The FIGURE is the median of
three table reports, the default an admin runs.

Users cannot open the store (it is root's), so their ``harp report`` asks
harpd; the second part starts a real harpd on the same store and times
the report through it (everyone's, as an admin asks with ``--daemon``, and
the busiest user's), while a client keeps sending predictions, to show
what a report costs the submissions waiting behind it.

    python bench/report_speed.py [--n 1000000] [--keep PATH] [--no-daemon]

``synthetic()`` is also what the report tests use to build realistic data.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from harpd.protocol import Decision  # noqa: E402
from harpd.records import JobRecord, Outcome, Resources  # noqa: E402

TARGET_S = 10.0
DAY = 86400.0


def synthetic(
    n: int, seed: int = 0, now: float = 1_780_000_000.0, days: float = 60.0, harp_fraction: float = 0.1
) -> tuple[list[JobRecord], list[dict[str, Any]], list[dict[str, Any]]]:
    """(records, submissions, attempts): ``n`` first runs ending over the last
    ``days`` before ``now``, plus resubmitted runs of harp-sized jobs that ran out."""
    rng = np.random.default_rng(seed)
    n_users = max(2, min(200, n // 50))
    users = np.array([f"user{u:03d}" for u in range(n_users)], dtype=object)
    weights = 1.0 / np.arange(1, n_users + 1) ** 0.8
    u = rng.choice(n_users, size=n, p=weights / weights.sum())
    accounts = np.array([f"proj{a:02d}" for a in range(max(1, n_users // 7))], dtype=object)
    acc = accounts[np.arange(n_users) % len(accounts)][u]
    # each user's habits: how much more time and memory they ask than they use
    time_over = np.maximum(np.exp(rng.normal(1.0, 0.6, n_users)), 1.1)[u]
    mem_over = np.maximum(np.exp(rng.normal(1.3, 0.7, n_users)), 1.1)[u]
    cpu_eff = rng.beta(4, 2, n_users)[u]
    part_names = np.array(["cpu", "gpu", "bigmem", "debug"], dtype=object)
    part = rng.choice(4, size=n, p=[0.7, 0.1, 0.1, 0.1])
    sig = np.array([f"app{k % 37}.sh" for k in range(500)], dtype=object)[(u * 7 + rng.integers(0, 3, n)) % 500]

    cpus = rng.choice([1, 2, 4, 8, 16, 32, 64], size=n, p=[0.3, 0.15, 0.2, 0.15, 0.1, 0.07, 0.03])
    used_t = np.clip(np.exp(rng.normal(np.log(1800), 1.4, n)), 10, 3 * DAY)
    harp = rng.random(n) < harp_fraction
    tf = np.where(harp, np.exp(rng.normal(0.25, 0.15, n)), time_over * np.exp(rng.normal(0, 0.3, n)))
    req_t = np.ceil(np.maximum(used_t * np.maximum(tf, 0.5), 60) / 60) * 60
    mem_need = cpus * np.exp(rng.normal(np.log(1500), 0.8, n))
    mf = np.where(harp, np.exp(rng.normal(0.2, 0.1, n)), mem_over * np.exp(rng.normal(0, 0.3, n)))
    req_m = np.ceil(np.maximum(mem_need * np.maximum(mf, 0.5), 100) / 100) * 100
    used_m = np.minimum(mem_need, req_m * 0.999)
    outcome = np.full(n, "completed", dtype=object)
    timeout = (used_t > req_t) | (rng.random(n) < 0.02)
    outcome[timeout] = "timeout"
    used_t = np.where(timeout, req_t + rng.integers(5, 100, n), used_t)
    oom = ~timeout & ((mem_need > req_m) | (rng.random(n) < 0.015))
    outcome[oom] = "oom"
    used_m = np.where(oom, req_m * 1.02, used_m)
    used_t = np.where(oom, used_t * rng.random(n), used_t)
    r = rng.random(n)
    outcome[(outcome == "completed") & (r < 0.02)] = "failed"
    outcome[(outcome == "completed") & (r > 0.97)] = "cancelled"
    outcome[(outcome == "completed") & (r > 0.969) & (r <= 0.97)] = "node_fail"
    used_cpu = used_t * cpus * np.clip(cpu_eff * np.exp(rng.normal(0, 0.2, n)), 0.01, 1.05)
    gpus = np.where(part == 1, rng.choice([1, 2, 4, 8], size=n), 0)
    end = now - rng.random(n) * days * DAY
    start = end - used_t
    submit = start - rng.exponential(600, n)
    # what harp-sized jobs' users had asked before harp changed it
    orig_t = np.ceil(used_t * time_over * np.exp(rng.normal(0.3, 0.3, n)) / 60) * 60
    orig_m = np.ceil(mem_need * mem_over / 100) * 100

    out_enum = {o.value: o for o in Outcome}
    records: list[JobRecord] = []
    subs: list[dict[str, Any]] = []
    attempts: list[dict[str, Any]] = []
    for i in range(n):
        o = outcome[i]
        rec = JobRecord(
            job_id=str(1_000_000 + i),
            source="bench",
            user=users[u[i]],
            account=acc[i],
            group=acc[i],
            partition=part_names[part[i]],
            job_name=sig[i],
            signature=sig[i],
            submit_time=float(submit[i]),
            start_time=float(start[i]),
            end_time=float(end[i]),
            outcome=out_enum[o],
            state=o.upper(),
            exit_code=0 if o == "completed" else 1,
            req_time_s=float(req_t[i]),
            req_mem_mb=float(req_m[i]),
            req_cpus=int(cpus[i]),
            req_nodes=1,
            req_gpus=int(gpus[i]) or None,
            alloc_cpus=int(cpus[i]),
            alloc_nodes=1,
            alloc_gpus=int(gpus[i]) or None,
            used_time_s=float(used_t[i]),
            used_mem_mb=float(used_m[i]),
            used_cpu_s=float(used_cpu[i]),
            censored_time=o == "timeout",
            censored_mem=o == "oom",
            harp_sized=bool(harp[i]),
            attempt=1,
        )
        records.append(rec)
        if harp[i]:
            subs.append(
                {
                    "job_id": rec.job_id,
                    "uid": 1000 + int(u[i]),
                    "user": rec.user,
                    "job": {"partition": rec.partition},
                    "original": {
                        "time_s": int(orig_t[i]),
                        "mem_mb": int(orig_m[i]),
                        "cpus_per_task": int(cpus[i]),
                        "ntasks": 1,
                    },
                    "submitted": {
                        "time_s": int(req_t[i]),
                        "mem_mb": int(req_m[i]),
                        "cpus_per_task": int(cpus[i]),
                        "ntasks": 1,
                    },
                    "decision": {"changes": [], "model": "harp" if i % 5 else "gbm"},
                    "chain_id": rec.job_id,
                }
            )
            if o in ("timeout", "oom"):
                ok = rng.random() < 0.9
                retry = JobRecord(**{**rec.to_dict(), "outcome": Outcome.COMPLETED if ok else Outcome.TIMEOUT})
                retry.job_id = rec.job_id + "r"
                retry.attempt = 2
                retry.req_time_s = rec.req_time_s * (2 if o == "timeout" else 1)
                retry.req_mem_mb = rec.req_mem_mb * (2 if o == "oom" else 1)
                retry.used_mem_mb = min(float(mem_need[i]), retry.req_mem_mb)
                retry.start_time = rec.end_time + 60
                retry.end_time = retry.start_time + (used_t[i] * 1.3 if o == "timeout" else used_t[i] * 2)
                retry.used_time_s = retry.end_time - retry.start_time
                retry.censored_time = retry.censored_mem = False
                records.append(retry)
                subs.append(
                    {
                        **subs[-1],
                        "job_id": retry.job_id,
                        "submitted": {
                            **subs[-1]["submitted"],
                            "time_s": int(retry.req_time_s),
                            "mem_mb": int(retry.req_mem_mb),
                        },
                    }
                )
                attempts.append(
                    {"chain_id": rec.job_id, "attempt": 1, "job_id": rec.job_id, "step": "done", "outcome": o}
                )
                attempts.append(
                    {
                        "chain_id": rec.job_id,
                        "attempt": 2,
                        "job_id": retry.job_id,
                        "step": "done",
                        "outcome": retry.outcome.value,
                    }
                )
    return records, subs, attempts


def fill_store(
    store: Any, records: list[JobRecord], subs: list[dict[str, Any]], attempts: list[dict[str, Any]]
) -> None:
    store.insert_jobs(records)
    for resource in ("time", "mem"):
        for name, champion, score in (("tsafrir", False, 0.91), ("gbm", False, 0.52), ("harp", True, 0.44)):
            store.save_model(
                name,
                resource,
                len(records) // 2,
                {"score": score, "under_rate": 0.04 + score / 100, "pinball": score / 3},
                f"/nonexistent/{name}.pkl",
                champion,
            )
    with store.transaction():
        for s in subs:
            store.add_submission(
                s["job_id"],
                s["uid"],
                s["user"],
                s["job"],
                Resources.model_validate(s["original"]),
                Resources.model_validate(s["submitted"]),
                Decision.model_validate(s["decision"]),
                chain_id=s["chain_id"],
            )
        for a in attempts:
            store.add_attempt(a["chain_id"], a["attempt"], a["job_id"], {}, "bench", "submitted")
            store.update_attempt(a["chain_id"], a["attempt"], step=a["step"], outcome=a["outcome"])


def time_report(db: Path, fmt: str) -> tuple[float, int]:
    """Wall time of one ``harp report`` process (interpreter start and imports
    included: that is what an admin waits for) and the output size."""
    out = Path(tempfile.gettempdir()) / f"harp-bench-report.{fmt}"
    argv = [
        sys.executable,
        "-m",
        "harpd.cli.main",
        "--config",
        "/dev/null",
        "report",
        "--db",
        str(db),
        "--since",
        "all",
        "--format",
        fmt,
    ]
    if fmt != "table":
        argv += ["-o", str(out)]
    t0 = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=REPO)
    dt = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"harp report --format {fmt} failed ({proc.returncode}): {proc.stderr.strip()}")
    return dt, (len(proc.stdout) if fmt == "table" else out.stat().st_size)


def _harpd(db: Path, d: Path) -> tuple[subprocess.Popen[bytes], Path]:
    """A real harpd serving ``db``, Slurm out of reach (no polling, no recovery); its log in ``d``."""
    from tests.helpers.harpd_process import wait_for_health

    sock = d / "harpd.sock"
    cfg = d / "harpd.toml"
    cfg.write_text(
        f'[server]\nsocket = "{sock}"\n[store]\npath = "{db}"\n[slurm]\nbin_dir = "{d}/no-slurm"\n'
        "[ingest]\npoll_interval_s = 3600\n[recovery]\nenabled = false\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HARP_", "SLURM_"))}
    with (d / "harpd.log").open("wb") as log:  # the child keeps its own copy of the descriptor
        proc = subprocess.Popen(
            [sys.executable, "-m", "harpd.daemon.main", "--config", str(cfg)],
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for_health(str(sock), proc, d / "harpd.log", timeout_s=120)
    except AssertionError as exc:
        proc.kill()
        raise SystemExit(f"harpd did not start: {exc}") from None
    return proc, cfg


def _report_via_harpd(cfg: Path, *extra: str) -> float:
    argv = [
        sys.executable,
        "-m",
        "harpd.cli.main",
        "--config",
        str(cfg),
        "report",
        "--daemon",
        "--since",
        "all",
        *extra,
    ]
    t0 = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=REPO)
    dt = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"harp report --daemon {' '.join(extra)} failed: {proc.stderr.strip()}")
    return dt


def _predict_while(cfg: Path, sock: Path) -> tuple[float, list[float]]:
    """(seconds of everyone's report, predict latencies in ms sent one after another meanwhile)."""
    import threading

    from harp_submit import client

    lat: list[float] = []
    done = threading.Event()
    req = {"op": "predict", "job": {"partition": "cpu", "job_name": "sim", "request": {"time_s": 3600}}}

    def predict() -> None:
        while not done.is_set():
            t0 = time.perf_counter()
            client.call(str(sock), req, 10.0)
            lat.append((time.perf_counter() - t0) * 1000)
            time.sleep(0.01)  # a busy site: ~100 sbatch a second

    t = threading.Thread(target=predict)
    t.start()
    try:
        dt = _report_via_harpd(cfg)
    finally:
        done.set()
        t.join()
    return dt, lat


def bench_daemon(db: Path) -> None:
    from harpd.store import Store
    from tests.helpers.harpd_process import stop_harpd

    with Store.open(db) as store:  # the busiest user: the worst case of a user's own report
        busiest, n_jobs = store.db.execute(
            'SELECT "user", COUNT(*) AS n FROM jobs GROUP BY "user" ORDER BY n DESC LIMIT 1'
        ).fetchone()
    with tempfile.TemporaryDirectory(prefix="hrb-", dir="/tmp") as d:
        proc, cfg = _harpd(db, Path(d))
        try:
            _report_via_harpd(cfg, "--user", busiest)  # warm: the first report also loads harpd's imports
            runs = [_report_via_harpd(cfg, "--user", busiest) for _ in range(3)]
            print(f"harp report via harpd, {busiest} ({n_jobs:,} jobs): " + ", ".join(f"{r:.2f}" for r in runs) + " s")
            dt, lat = _predict_while(cfg, Path(d) / "harpd.sock")
            print(
                f"harp report via harpd, everyone: {dt:.2f} s; meanwhile {len(lat)} predictions, "
                f"p50 {statistics.median(lat):.1f} ms, p99 {_p99(lat):.1f} ms, max {max(lat):.1f} ms"
            )
            med = statistics.median(runs)
            print(
                f"FIGURE report_user_via_harpd: {med:.2f} s (target < {TARGET_S:g} s) "
                f"{'PASS' if med < TARGET_S else 'FAIL'} busiest user, median of 3"
            )
            print(
                f"FIGURE report_all_via_harpd: {dt:.2f} s (target < {TARGET_S:g} s) "
                f"{'PASS' if dt < TARGET_S else 'FAIL'} every user, as an admin with --daemon"
            )
        finally:
            stop_harpd(proc)


def _p99(xs: list[float]) -> float:
    return float(np.percentile(np.array(xs), 99)) if xs else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1_000_000, help="first-run jobs to generate (default 1,000,000)")
    ap.add_argument("--keep", metavar="PATH", help="store file to reuse (generated only if missing)")
    ap.add_argument("--no-daemon", action="store_true", help="skip the reports through a real harpd")
    args = ap.parse_args()
    from harpd.store import Store

    tmp = None
    if args.keep:
        db = Path(args.keep)
    else:
        tmp = tempfile.TemporaryDirectory(prefix="harp-bench-")
        db = Path(tmp.name) / "harp.db"
    try:
        if not db.exists():
            t0 = time.perf_counter()
            records, subs, attempts = synthetic(args.n)
            t1 = time.perf_counter()
            with Store.open(db) as store:
                fill_store(store, records, subs, attempts)
                stored = store.count_jobs(finished_only=False)
            print(
                f"generated {len(records):,} records in {t1 - t0:.1f} s, stored {stored:,} in "
                f"{time.perf_counter() - t1:.1f} s ({len(subs):,} submissions, {len(attempts):,} attempts)"
            )
            del records, subs, attempts
        else:
            with Store.open(db) as store:
                stored = store.count_jobs(finished_only=False)
            print(f"reusing {db} with {stored:,} jobs")
        runs = []
        for fmt in ("table", "csv", "json", "html", "table", "table"):
            dt, size = time_report(db, fmt)
            if fmt == "table":
                runs.append(dt)
            print(f"harp report --format {fmt:<5} {dt:6.2f} s  ({size:,} bytes)")
        dt = statistics.median(runs)
        print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs (timings stretch with it)")
        print(f"report_speed: median of 3 table reports, {stored:,} jobs")
        print(f"FIGURE report_speed: {dt:.2f} s (target < {TARGET_S:g} s) {'PASS' if dt < TARGET_S else 'FAIL'}")
        if not args.no_daemon:
            bench_daemon(db)
        return 0
    finally:
        if tmp is not None:
            tmp.cleanup()


if __name__ == "__main__":
    sys.exit(main())
