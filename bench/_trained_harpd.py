"""A real harpd with trained models on real history, for the latency and load benches.

The store holds the KTH and CTC traces; this process's user is given the KTH
users' history (harpd knows a caller by SO_PEERCRED or MUNGE, never by the
message), and the GBM + conformal model is trained on it, so ``predict``
runs the model harpd runs in production, not a no-change champion.
"""

from __future__ import annotations

import dataclasses
import os
import pwd
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

TRACES = ("KTH-SP2-1996-2.1-cln.swf.gz", "CTC-SP2-1996-3.1-cln.swf.gz")


def history(folder: Path) -> list[Any]:
    """The traces' records with a request and a submit time, oldest first."""
    from harpd.traces import read_trace

    recs = []
    for name in TRACES:
        p = folder / name
        if p.exists():
            recs.extend(r for r in read_trace(p) if r.req_time_s and r.submit_time is not None)
    recs.sort(key=lambda r: r.submit_time)
    return recs


def trained_store(
    d: Path, recs: list[Any], server_toml: str = "max_clients = 64\n", extra_toml: str = ""
) -> tuple[Path, Path, list[Any]]:
    """(config, socket, this user's records): a store in ``d`` with ``recs`` and a trained time model.

    ``server_toml``: more ``[server]`` lines (``listen``, ``max_clients``); ``extra_toml``: more sections.
    """
    from threadpoolctl import threadpool_limits

    from harpd.config import HarpSettings
    from harpd.store import Store
    from harpd.training.champions import train

    sock, db, cfg = d / "harpd.sock", d / "harp.db", d / "harpd.toml"
    cfg.write_text(
        f'[server]\nsocket = "{sock}"\nlog_level = "warning"\n{server_toml}'
        f'[store]\npath = "{db}"\n[slurm]\nbin_dir = "{d / "no-slurm"}"\n'
        '[ingest]\npoll_interval_s = 3600\n[recovery]\nenabled = false\n'
        '[predict]\npredictor = "harp"\n' + extra_toml
    )
    settings = HarpSettings(store={"path": str(db)}, predict={"predictor": "harp"})
    store = Store.open(db)
    store.insert_jobs(recs)
    me = pwd.getpwuid(os.getuid()).pw_name
    mine = [dataclasses.replace(r, user=me, source="bench") for r in recs if r.source.startswith("KTH")]
    store.insert_jobs(mine)
    with threadpool_limits(1):
        res = train(store, settings, "time")
    print(f"trained on {res.n_jobs} jobs in {res.seconds:.1f}s (champion {res.champion})")
    store.close()
    return cfg, sock, mine


def requests(recs: list[Any], n: int) -> list[tuple[Any, str]]:
    """(JobRequest, user) for the ``n`` most recent records, as harp-submit would send them."""
    from harpd.protocol import JobRequest

    out = []
    for r in recs[-n:]:
        # the signature as the store has it (harp-submit computes it the same way live)
        job = JobRequest(
            partition=r.partition,
            request={"time_s": int(r.req_time_s), "ntasks": r.req_cpus or 1},
            signature=r.signature,
        )
        out.append((job, r.user or "nobody"))
    return out


def start(cfg: Path, d: Path, sock: Path) -> subprocess.Popen[bytes]:
    """harpd on ``cfg``, answering health on ``sock``; RuntimeError with its log's end otherwise."""
    from harp_submit import client

    env = {**os.environ, "HARP_CONFIG": str(cfg), "OMP_NUM_THREADS": "1"}
    log = (d / "harpd.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "harpd.daemon.main", "--config", str(cfg)],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        cwd=str(d),
    )
    log.close()
    end = time.monotonic() + 120
    while True:
        if proc.poll() is not None:
            raise RuntimeError((d / "harpd.log").read_text()[-2000:])
        try:
            if client.call(str(sock), {"op": "health"}, 5).get("store") == "ok":
                return proc
        except client.HarpdUnavailable:
            pass
        if time.monotonic() > end:
            stop(proc)
            raise RuntimeError("harpd did not start: " + (d / "harpd.log").read_text()[-2000:])
        time.sleep(0.2)


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
