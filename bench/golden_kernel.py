"""The golden check on the shared traces: harpd's ``decide`` and the replay allocate every job alike.

For each trace with time requests (a slice of CTC-SP2, HPC2N, Cedar and
METACENTRUM, KTH-SP2 whole) ``harpd.replay.golden.golden_time`` walks the
jobs through ``ModelPredictor.decide`` (fed each outcome as it finishes,
with the replay's clock) and through the replay's champion walk, with one
champion trained on the first half, under hard limits (the kill-cost gate
with gain 1, so that cuts happen) and soft limits, and memory where the
trace has both requests and peaks (none of the shared ones has: the unit
test's synthetic trace covers it), and prints the number of jobs whose
allocations differ (target 0).  A trace missing is skipped.

    python bench/golden_kernel.py [--traces DIR] [--slice N] [--only KTH,CTC]
"""
# bench: slow
# bench: timeout=3600

from __future__ import annotations

import argparse
import itertools
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from bench._traces import traces_dir  # noqa: E402

TRACES = {  # name: (file, jobs read: None = whole)
    "KTH": ("KTH-SP2-1996-2.1-cln.swf.gz", None),
    "CTC": ("CTC-SP2-1996-3.1-cln.swf.gz", 6000),
    "HPC2N": ("HPC2N-2002-2.2-cln.swf.gz", 6000),
    "Cedar": ("cedar-2021.sacct.psv.gz", 6000),
    "METACENTRUM": ("METACENTRUM-2009-2.swf.gz", 6000),
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", help="folder of the traces (default: $HARP_TRACES, else ../shared/traces)")
    ap.add_argument("--slice", type=int, help="jobs read from each sliced trace (default 6000)")
    ap.add_argument("--only", help="comma-separated trace names")
    args = ap.parse_args()
    from harpd.config import HarpSettings
    from harpd.replay.dataset import read_trace
    from harpd.replay.engine import ReplayConfig
    from harpd.replay.golden import golden

    folder = traces_dir(args.traces)
    if folder is None:
        print("golden_kernel: no traces folder (../shared/traces, $HARP_TRACES or --traces): skipped")
        return 0
    only = set(args.only.split(",")) if args.only else None
    base = HarpSettings()
    settings = base.model_copy(update={"predict": base.predict.model_copy(update={"hard_cut_gain": 1.0})})
    total = 0
    for name, (file, n) in TRACES.items():
        if only and name not in only:
            continue
        path = folder / file
        if not path.is_file():
            print(f"{name}: {path} missing: skipped")
            continue
        if n is not None and args.slice:
            n = args.slice
        records = list(itertools.islice(read_trace(path), n))
        for resource, limits in (("time", "hard"), ("time", "soft"), ("mem", "hard")):
            cfg = ReplayConfig.of_site(settings, resource, limits)
            t0 = time.perf_counter()
            try:
                res = golden(records, settings, cfg, resource)
            except ValueError as exc:
                print(f"{name} {resource} {limits}: not compared: {exc}")
                continue
            total += len(res.mismatches)
            print(
                f"{name} {resource} {limits}: {res.jobs} jobs compared, {res.changed} changed by the replay, "
                f"mismatches {len(res.mismatches)} ({time.perf_counter() - t0:.0f}s)",
                flush=True,
            )
            for i, want, got in res.mismatches[:5]:
                print(f"  job {i}: replay {want}, harpd {got}")
    print(f"FIGURE golden_mismatches: {total} (target = 0) {'PASS' if total == 0 else 'FAIL'}")
    return 0 if total == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
