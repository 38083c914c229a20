"""The CTC-SP2 trace (77k jobs) through the EASY simulator for 4 policies: under 5 minutes.

Runs the real command, ``harp replay CTC --models request,harp --schedule``,
as a process: the trace is replayed with harp in the loop once with hard
limits and once with soft limits (``harpd.replay.engine``), then the queue
is simulated (``harpd.evaluate.schedule_simulation`` → ``harpd.simulate``) once per policy,
single-threaded, one after the other:

* ``users``: the users' requested times, jobs killed at their request;
* ``harp-hard``: harp's allocations, a job reaching one killed and resubmitted
  by the escalation rule;
* ``harp-soft``: harp's soft limits, a job reaching one extended by the rule;
* ``exact``: limits equal to the true runtimes (the bound no predictor beats).

The figure is the simulation time of the policies (the command reports each
one's), over all the copies of the trace it simulates (``--replicas``,
default 5: the recorded trace and four shaken copies, ``harpd.simulate.shake``);
the replays' own time is printed beside it (``bench/replay_speed.py``
holds the replay's target).  A progress bar appears on stderr when it is a
terminal.

    python bench/schedule_speed.py [--trace PATH | --traces DIR] [--procs N] [--quiet]
"""
# bench: slow
# bench: timeout=900

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from bench._replay_run import replay_timed  # noqa: E402
from bench._traces import trace_file  # noqa: E402

TRACE = "CTC-SP2-1996-3.1-cln.swf.gz"
TARGET_S = 300.0
POLICIES = 4


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, help=f"SWF trace (default: {TRACE} in the traces folder)")
    ap.add_argument("--traces", help="folder of the traces (default: $HARP_TRACES, else ../shared/traces)")
    ap.add_argument("--procs", type=int, help="machine size (default: the MaxProcs/MaxNodes header)")
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    args = ap.parse_args()
    args.trace = trace_file("schedule_speed", TRACE, args.trace, args.traces)
    argv = [
        sys.executable,
        "-m",
        "harpd.cli.main",
        "replay",
        str(args.trace),
        "--models",
        "request,harp",
        "--schedule",
        "--format",
        "json",
    ]
    if args.procs:
        argv += ["--procs", str(args.procs)]
    if args.quiet or not sys.stderr.isatty():
        argv.append("--quiet")
    proc, wall = replay_timed(argv)
    if proc.returncode != 0:
        print(f"FIGURE schedule_speed_ctc_4_policies_s: nan s (target < {TARGET_S:g}) FAIL")
        return 1
    q = json.loads(proc.stdout)["queue"]
    print(f"trace {args.trace.name}: {q['jobs']:,} jobs, {q['procs']} processors, {q.get('replicas', 1)} copies")
    for p in q["policies"]:
        print(
            f"{p['policy']:<10} mean wait {p['mean_wait_s']:9.0f} s  p95 wait {p['p95_wait_s']:9.0f} s  "
            f"mean bsld {p['mean_bounded_slowdown']:8.2f}  util {p['utilization']:.3f} "
            f"(useful {p['useful_utilization']:.3f})  kills {p['kills']}  ext {p['extensions']}  "
            f"delayed {p['delayed_starts']}  [{p['seconds']:.1f} s]"
        )
    for n in q["notes"]:
        print(f"note: {n}")
    sim = sum(p["seconds"] for p in q["policies"])
    n = len(q["policies"])
    ok = sim < TARGET_S and n == POLICIES
    print(f"replays and simulation together: {wall:.1f} s")
    print(
        f"FIGURE schedule_speed_ctc_{n}_policies_s: {sim:.1f} s (target < {TARGET_S:g} for {POLICIES} policies) "
        f"{'PASS' if ok else 'FAIL'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
