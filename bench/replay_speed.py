"""How long `harp replay` takes on the 200k-job HPC2N trace (target < 5 minutes).

Runs the real command as a process (reading the gzip SWF, building features,
20 retrains of the GBM + conformal model, the baselines, the metric table),
single-threaded as on a shared machine, and prints its wall time.

    python bench/replay_speed.py [--trace PATH | --traces DIR] [--limit N]
"""
# bench: slow
# bench: timeout=1200

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from bench._traces import trace_file  # noqa: E402

TRACE = "HPC2N-2002-2.2-cln.swf.gz"
TARGET_S = 300.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", help=f"the trace to replay (default: {TRACE} in the traces folder)")
    ap.add_argument("--traces", help="folder of the traces (default: $HARP_TRACES, else ../shared/traces)")
    ap.add_argument("--limit", type=int)
    args = ap.parse_args()
    trace = str(trace_file("replay_speed", TRACE, args.trace, args.traces))
    argv = [sys.executable, "-m", "harpd.cli.main", "replay", trace, "--format", "json", "--quiet"]
    if args.limit:
        argv += ["--limit", str(args.limit)]
    t0 = time.perf_counter()
    proc = subprocess.run(argv, cwd=str(REPO), capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        print(proc.stderr.strip()[-2000:], file=sys.stderr)
        print(f"FIGURE replay_hpc2n_s: nan s (target < {TARGET_S:g}) FAIL")
        return 1
    rep = json.loads(proc.stdout)
    harp = next((m for m in rep["models"] if m["model"] == "harp"), None)
    print(f"jobs {rep['jobs']}, retrains {rep['retrains']}, in-process {rep['seconds']:.1f}s")
    if harp:
        print(
            f"harp: under {harp['under_rate']:.2%}, over-reservation vs users {harp['over_vs_request']:.3f}, "
            f"consumed vs users {harp['consumed_vs_request']:.3f}"
        )
    ok = wall < TARGET_S
    print(f"FIGURE replay_hpc2n_s: {wall:.1f} s (target < {TARGET_S:g}) {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
