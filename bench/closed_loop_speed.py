"""HPC2N (203k jobs) through the closed-loop queue simulation, 5 copies: at most 10 minutes.

Runs the real command, ``harp replay HPC2N --models request,harp --limits
soft --schedule --replicas 5``, as a process: the trace is replayed with harp
once with soft and once with hard limits, then every policy is simulated on
five copies, harp-soft in a closed loop (each job's limit decided at its
submission from the simulated queue, ``harpd.predict.queue_policy``).  The
figure is the command's wall time, replays included; the queue section's own
seconds per policy are printed beside it.

    python bench/closed_loop_speed.py [--trace PATH | --traces DIR]
"""
# bench: slow
# bench: timeout=1500

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from bench._replay_run import replay_timed  # noqa: E402
from bench._traces import trace_file  # noqa: E402

TRACE = "HPC2N-2002-2.2-cln.swf.gz"
TARGET_S = 600.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, help=f"SWF trace (default: {TRACE} in the traces folder)")
    ap.add_argument("--traces", help="folder of the traces (default: $HARP_TRACES, else ../shared/traces)")
    args = ap.parse_args()
    args.trace = trace_file("closed_loop_speed", TRACE, args.trace, args.traces)
    argv = [sys.executable, "-m", "harpd.cli.main", "replay", str(args.trace), "--models", "request,harp"]
    argv += ["--limits", "soft", "--schedule", "--replicas", "5", "--format", "json", "--quiet"]
    proc, wall = replay_timed(argv)
    if proc.returncode != 0:
        print(f"FIGURE closed_loop_speed_hpc2n_s: nan s (target <= {TARGET_S:g}) FAIL (exit {proc.returncode})")
        return 1
    q = json.loads(proc.stdout)["queue"]
    per = ", ".join(f"{p['policy']} {p['seconds']:.0f}s" for p in q["policies"])
    print(f"{args.trace.name}: {q['jobs']} jobs, {q['replicas']} copies, harp-soft {q.get('soft_loop')} loop; {per}")
    for f, short in (("mean_wait_s", "wait"), ("mean_bounded_slowdown", "bsld")):  # what the run decided
        c = (q.get("vs_users") or {}).get("harp-soft", {}).get(f) or {}
        if c.get("rel_diff") is not None:
            print(f"  harp-soft {short} vs the users' requests: {c['rel_diff']:+.4f} ±{c.get('se') or 0:.4f}")
    ok = wall <= TARGET_S
    print(f"FIGURE closed_loop_speed_hpc2n_s: {wall:.0f} s (target <= {TARGET_S:g}) {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
