"""Predictions over TCP with MUNGE from 200 concurrent clients (targets: >= 500 predictions/s, p99 <= 20 ms).

The load of a large site's login nodes at peak, against one real harpd with
trained models (``bench/_trained_harpd.py``: KTH + CTC history, the GBM +
conformal model), listening on loopback TCP with the cluster's munged.

The clients: 200 threads spread over ``--procs`` processes (default 2; 200
client processes on this 2-core machine would measure process start-up,
not harpd), each thread one client doing exactly what harp-submit does per
request, ``client.call_tcp``: a fresh MUNGE credential bound to the request
(encode at munged), connect, send, read, check harpd's credential on the
answer (decode at munged), close.  harpd decodes and encodes one credential
per request too, so every prediction costs four munged round trips.  The
clients run on the same two cores as harpd and munged: the figures are a
floor for a harpd host of its own.

1. saturation: every client sends its next request as soon as it has the
   answer (200 requests always in flight): the most predictions per second
   (latency there is queueing: 200 / throughput);
2. open loop at ``--rate`` (default 500/s) offered by the 200 clients
   together, Poisson arrivals as sbatch calls arrive: the answered rate and
   the latency percentiles.  FIGURE lines: the saturation throughput, the
   rate answered at 500/s, and that load's p99.

    python bench/tcp_load.py [--clients 200] [--procs 2] [--rate 500] [--seconds 20] [--nice -10]
                             [--munge-socket PATH]
"""
# bench: timeout=1500

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from bench import _trained_harpd as trained  # noqa: E402
from bench._traces import traces_folder  # noqa: E402
from tests.helpers.munge_env import SYSTEM_SOCKET, cluster_munge_socket, free_port  # noqa: E402

TARGET_RATE = 500.0
TARGET_P99_MS = 20.0


def munge_socket(given: str | None) -> str:
    """--munge-socket, else HARP_MUNGE_SOCKET, else the local cluster's (slurm.conf AuthInfo), else munged's default."""
    if given or os.environ.get("HARP_MUNGE_SOCKET"):
        return given or os.environ["HARP_MUNGE_SOCKET"]
    conf = os.environ.get("SLURM_CONF") or str(
        Path(os.environ.get("HARP_SLURM_DIR", "/tmp/harp-localslurm")) / "etc" / "slurm.conf"
    )
    return cluster_munge_socket(conf) if Path(conf).exists() else SYSTEM_SOCKET


def clients(
    k: int,
    threads: int,
    server: tuple[str, int] | str,
    sock: str,
    msgs: list[dict[str, Any]],
    rate: float | None,
    seconds: float,
    start_at: float,
    out: Any,
) -> None:
    """One client process: ``threads`` clients until ``start_at + seconds``; puts (latencies ms, errors).

    ``server``: (host, port) for TCP with MUNGE, or a Unix socket path (``--path unix``, for comparison).
    """
    from harp_submit import client
    from harp_submit.munge import Munge

    munge = Munge(sock)
    lat: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()

    def one(t: int) -> None:
        rng = np.random.default_rng(k * 1000 + t)
        mine: list[float] = []
        bad: list[str] = []
        i = t
        while time.time() < start_at:
            time.sleep(0.01)
        end = start_at + seconds
        nxt = time.perf_counter()
        while time.time() < end:
            if rate:  # open loop: this client's share of the offered rate, Poisson
                nxt += rng.exponential(1.0 / rate)
                pause = nxt - time.perf_counter()
                if pause > 0:
                    time.sleep(pause)
            msg = msgs[i % len(msgs)]
            i += threads
            t0 = time.perf_counter()
            try:
                if isinstance(server, str):
                    client.call(server, msg, 10)
                else:
                    client.call_tcp(server, msg, 10, munge)
                mine.append((time.perf_counter() - t0) * 1e3)
            except client.HarpdUnavailable as exc:
                bad.append(exc.reason)
        with lock:
            lat.extend(mine)
            errors.extend(bad)

    th = [threading.Thread(target=one, args=(t,)) for t in range(threads)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    out.put((lat, errors))


def load(
    n_clients: int,
    procs: int,
    server: tuple[str, int] | str,
    sock: str,
    msgs: list[dict[str, Any]],
    rate: float | None,
    seconds: float,
) -> tuple[list[float], list[str], float]:
    """(latencies ms, errors, seconds) of ``n_clients`` clients over ``procs`` processes."""
    ctx = mp.get_context("fork")
    out = ctx.Queue()
    per = [n_clients // procs + (1 if k < n_clients % procs else 0) for k in range(procs)]
    start_at = time.time() + 1.0  # every process up before the clock starts
    ps = [
        ctx.Process(
            target=clients,
            args=(k, per[k], server, sock, msgs, None if rate is None else rate / n_clients, seconds, start_at, out),
        )
        for k in range(procs)
    ]
    for p in ps:
        p.start()
    lat: list[float] = []
    errors: list[str] = []
    for _ in ps:
        got_lat, got_err = out.get(timeout=seconds + 300)
        lat.extend(got_lat)
        errors.extend(got_err)
    for p in ps:
        p.join(30)
    return lat, errors, seconds


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=200)
    ap.add_argument("--procs", type=int, default=2, help="client processes the clients are spread over")
    ap.add_argument("--rate", type=float, default=TARGET_RATE, help="offered load of all clients together, /s")
    ap.add_argument("--seconds", type=float, default=20.0, help="length of each phase")
    ap.add_argument(
        "--path",
        choices=["tcp", "unix"],
        default="tcp",
        help="tcp (default): TCP with MUNGE; unix: the same load over harpd's Unix socket, for comparison",
    )
    ap.add_argument("--munge-socket", help="munged's socket (default: the local cluster's, else munged's default)")
    ap.add_argument("--traces", help="folder of the traces (default: $HARP_TRACES, else ../shared/traces)")
    ap.add_argument(
        "--nice",
        type=int,
        default=-10,
        help="run harpd and the clients at this niceness when permitted (default -10, as "
        "bench/submit_overhead.py): other work on a shared machine then disturbs the tail less; "
        "0 to leave it (munged keeps its own)",
    )
    args = ap.parse_args()
    name = args.path  # the FIGURE lines' prefix
    niceness = "unchanged"
    if args.nice:
        try:
            os.nice(args.nice)  # inherited by harpd and the client processes
            niceness = f"{args.nice:+d}"
        except OSError:
            niceness = "unchanged (not permitted)"
    folder = traces_folder("tcp_load", trained.TRACES, args.traces)

    from harp_submit import client
    from harp_submit.munge import Munge, MungeError

    sock = munge_socket(args.munge_socket)
    try:
        Munge(sock).check()
    except MungeError as exc:
        print(f"tcp_load: {exc.message}", file=sys.stderr)
        print(f"FIGURE {name}_predictions_per_s: nan /s (target >= {TARGET_RATE:g}) FAIL")
        return 2
    recs = trained.history(folder)
    if not recs:
        print("tcp_load: no traces found", file=sys.stderr)
        return 2
    port = free_port()
    server = ("127.0.0.1", port)
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        # one connection per client at once: max_clients above the 200, or the rest are told "busy"
        cfg, unix, mine = trained.trained_store(
            d,
            recs,
            server_toml=f'listen = ["127.0.0.1:{port}"]\nmax_clients = {args.clients + 56}\n',
            extra_toml=f'[munge]\nsocket = "{sock}"\n',
        )
        msgs = [{"op": "predict", "job": job.model_dump(exclude_none=True)} for job, _ in trained.requests(mine, 5000)]
        proc = trained.start(cfg, d, unix)
        try:
            munge = Munge(sock)
            warm = [client.call_tcp(server, m, 10, munge) for m in msgs[:300]]
            changed = sum(bool(a["decision"]["changes"]) for a in warm)
            print(
                f"niceness {niceness}; munged {sock} via {munge.via}; "
                f"harpd over TCP: {changed} of {len(warm)} warm-up answers "
                f"changed a request (models {sorted({str(a['decision'].get('model')) for a in warm})})"
            )
            target: tuple[str, int] | str = server if args.path == "tcp" else str(unix)
            print(f"path: {args.path} ({'TCP with MUNGE' if args.path == 'tcp' else 'the Unix socket, no MUNGE'})")
            sat, sat_err, sat_s = load(args.clients, args.procs, target, sock, msgs, None, args.seconds)
            opn, opn_err, opn_s = load(args.clients, args.procs, target, sock, msgs, args.rate, args.seconds)
        finally:
            trained.stop(proc)
    if not sat or not opn:
        print(f"tcp_load: every request failed: {(sat_err + opn_err)[:3]}")
        print(f"FIGURE {name}_predictions_per_s: nan /s (target >= {TARGET_RATE:g}) FAIL")
        return 1
    capacity = len(sat) / sat_s
    print(
        f"saturation, {args.clients} clients in {args.procs} processes, each sending as soon as answered: "
        f"{len(sat)} answers in {sat_s:g} s = {capacity:.0f}/s, p50 {np.percentile(sat, 50):.1f} ms, "
        f"p99 {np.percentile(sat, 99):.1f} ms (queueing: {args.clients} in flight), errors {len(sat_err)}"
    )
    answered = len(opn) / opn_s
    p50, p99 = np.percentile(opn, 50), np.percentile(opn, 99)
    print(
        f"open loop, {args.clients} clients offering {args.rate:g}/s together: {len(opn)} answers in "
        f"{opn_s:g} s = {answered:.0f}/s, p50 {p50:.1f} ms, p90 {np.percentile(opn, 90):.1f} ms, "
        f"p99 {p99:.1f} ms, max {max(opn):.1f} ms, errors {len(opn_err)}"
    )
    for e in sorted(set(sat_err + opn_err))[:5]:
        print(f"  error: {e}")
    ok_cap = capacity >= TARGET_RATE
    ok_rate = answered >= 0.97 * args.rate and not opn_err  # Poisson: the count itself varies by ~1%
    ok_p99 = p99 <= TARGET_P99_MS and not opn_err
    print(
        f"FIGURE {name}_predictions_per_s: {capacity:.0f} /s (target >= {TARGET_RATE:g}) {'PASS' if ok_cap else 'FAIL'}"
    )
    print(
        f"FIGURE {name}_answered_at_{args.rate:g}_per_s: {answered:.0f} /s (target >= {0.97 * args.rate:g}) "
        f"{'PASS' if ok_rate else 'FAIL'}"
    )
    print(f"FIGURE {name}_p99_ms: {p99:.1f} ms (target <= {TARGET_P99_MS:g}) {'PASS' if ok_p99 else 'FAIL'}")
    return 0 if ok_cap and ok_rate and ok_p99 else 1


if __name__ == "__main__":
    sys.exit(main())
