"""Answers under a flood of idle TCP connections (targets: TCP predict and Unix-socket status within 1 s).

Anyone who reaches harpd's TCP port can open connections and send nothing.
A real harpd (the real Slurm backend, the cluster's munged, TCP on
loopback) is flooded with ``--count`` idle connections from ``--hosts``
loopback addresses (``bench/_flood.py``: each one harpd closes is reopened at
once), while a legitimate client on 127.0.0.1 asks, one after another:

* a ``predict`` over TCP with a fresh MUNGE credential (``client.call_tcp``,
  what harp-submit does), and
* a ``status`` on the Unix socket (what root and this host's users do).

Each answer's wall time is measured at the client, connect to answer read.
The figures: the slowest of each under the flood (an answer must come, and
within 1 s), and the harpd log lines the flood cost per minute (one per
refusal would be thousands a second; the refusal log sums them up per
interval, 10 s by default).

    python bench/tcp_flood.py [--count 500] [--hosts 25] [--seconds 30] [--probes 30]
"""
# bench: timeout=600

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))
from _flood import IdleFlood, loopback_sources  # noqa: E402
from load_submit import Harpd, slurm_conf  # noqa: E402

from harp_submit import client  # noqa: E402
from harp_submit.munge import Munge, MungeError  # noqa: E402
from tests.helpers.munge_env import cluster_munge_socket, free_port  # noqa: E402

TARGET_MS = 1000.0
PREDICT = {"op": "predict", "job": {"job_name": "flood-probe", "partition": "short", "request": {"time_s": 600}}}
STATUS = {"op": "status", "job_id": "1"}


def probe(server: tuple[str, int], unix: str, munge: Munge) -> tuple[float, float, list[str]]:
    """(TCP predict ms, Unix status ms, problems) for one round."""
    problems = []
    t0 = time.perf_counter()
    try:
        ans = client.call_tcp(server, PREDICT, 10, munge)
        if not ans.get("ok"):
            problems.append(f"predict: {ans.get('error')}")
    except client.HarpdUnavailable as exc:
        problems.append(f"predict: {exc.reason}")
    t1 = time.perf_counter()
    try:
        client.call(unix, STATUS, 10)  # an answer, ok or "knows no job": either is harpd answering
    except client.HarpdUnavailable as exc:
        if not exc.final:
            problems.append(f"status: {exc.reason}")
    t2 = time.perf_counter()
    return (t1 - t0) * 1e3, (t2 - t1) * 1e3, problems


def figure(name: str, value: float, unit: str, op: str, target: float) -> str:
    ok = value <= target if op == "<=" else value >= target
    return f"FIGURE {name}: {value:.0f} {unit} (target {op} {target:g}) {'PASS' if ok else 'FAIL'}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=500, help="idle connections held at once")
    ap.add_argument("--hosts", type=int, default=25, help="loopback addresses the flood comes from")
    ap.add_argument("--seconds", type=float, default=30.0, help="how long the flood lasts at most")
    ap.add_argument("--probes", type=int, default=30, help="rounds of one TCP predict and one Unix status")
    args = ap.parse_args()
    conf = slurm_conf()
    if conf is None:
        print("tcp_flood: no local cluster (bash scripts/localslurm start)", file=sys.stderr)
        print(f"FIGURE flood_tcp_predict_max_ms: nan ms (target <= {TARGET_MS:g}) FAIL")
        return 2
    sock = cluster_munge_socket(conf)
    try:
        Munge(sock).check()
    except MungeError as exc:
        print(f"tcp_flood: {exc.message}", file=sys.stderr)
        print(f"FIGURE flood_tcp_predict_max_ms: nan ms (target <= {TARGET_MS:g}) FAIL")
        return 2
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HARP_", "SLURM_"))}
    env.update({"SLURM_CONF": conf, "PYTHONPATH": str(REPO)})
    port = free_port()
    munge = Munge(sock)
    with tempfile.TemporaryDirectory(prefix="hfl-") as d:
        h = Harpd(Path(d), env, "info", listen=f"127.0.0.1:{port}", munge_socket=sock)
        h.start()
        try:
            server = ("127.0.0.1", port)
            base = [probe(server, h.socket, munge) for _ in range(5)]
            lines_before = len(h.log.read_text(errors="replace").splitlines())
            with IdleFlood(port, args.count, loopback_sources(args.hosts), args.seconds) as flood:
                flood.wait_held(min(args.count, 16 * args.hosts), timeout=args.seconds / 2)
                t_flood = time.monotonic()
                rounds = []
                for _ in range(args.probes):
                    rounds.append(probe(server, h.socket, munge))
                    time.sleep(0.5)
                flood_s = time.monotonic() - t_flood
                opened, peak = flood.opened, flood.peak
            log_lines = h.log.read_text(errors="replace").splitlines()[lines_before:]
        finally:
            h.stop()
    problems = [p for r in rounds for p in r[2]]
    tcp_ms = [r[0] for r in rounds]
    unix_ms = [r[1] for r in rounds]
    print(
        f"flood: {peak} idle connections held at most, {opened} opened in all from {args.hosts} loopback hosts; "
        f"{args.probes} probe rounds in {flood_s:.1f}s"
    )
    print(
        f"without a flood: TCP predict {max(b[0] for b in base):.0f} ms, "
        f"Unix status {max(b[1] for b in base):.0f} ms (slowest of 5)"
    )
    print(
        f"under the flood: TCP predict median {sorted(tcp_ms)[len(tcp_ms) // 2]:.0f} ms, "
        f"Unix status median {sorted(unix_ms)[len(unix_ms) // 2]:.0f} ms"
    )
    if problems:
        print(f"problems ({len(problems)}): {problems[:5]}")
    # the probes' own status answers ("knows no job 1") are logged too: they are not the flood's
    flood_lines = [ln for ln in log_lines if " status uid=" not in ln]
    print(f"harpd log: {len(flood_lines)} lines about the flood ({opened} connections); e.g.:")
    for ln in flood_lines[:4]:
        print(f"  {ln[:300]}")
    worst_tcp = max(tcp_ms) if not any(p.startswith("predict") for p in problems) else float("inf")
    worst_unix = max(unix_ms) if not any(p.startswith("status") for p in problems) else float("inf")
    print(figure("flood_tcp_predict_max_ms", worst_tcp, "ms", "<=", TARGET_MS))
    print(figure("flood_unix_status_max_ms", worst_unix, "ms", "<=", TARGET_MS))
    per_min = len(flood_lines) / max(flood_s, 1e-9) * 60
    print(figure("flood_log_lines_per_min", per_min, "lines/min", "<=", 60))
    return 0 if worst_tcp <= TARGET_MS and worst_unix <= TARGET_MS else 1


if __name__ == "__main__":
    sys.exit(main())
