#!/usr/bin/env python3
"""A small real workload for the demo: its memory and run time follow its arguments.

    python3 workload.py --mb 200 --seconds 8

holds ``--mb`` MiB of touched memory (resident, so Slurm's accounting and
``OverMemoryKill`` see it) for ``--seconds`` of light work, then prints
what it used.  The demo copies it under several names (simulate.py,
analyse.py, grow.py): harp groups jobs by the program they run, so each
name is its own application with its own history.
"""

from __future__ import annotations

import argparse
import os
import resource
import time

PAGE = 4096


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, required=True, help="MiB of memory to hold")
    ap.add_argument("--seconds", type=float, required=True, help="how long to work")
    args = ap.parse_args()
    if args.mb < 0 or args.seconds < 0:
        ap.error("--mb and --seconds must not be negative")
    t0 = time.monotonic()
    step = 16 << 20
    blocks = []
    left = args.mb << 20
    while left > 0:  # grow in steps, each page written, so RSS really grows
        n = min(step, left)
        block = bytearray(n)
        for i in range(0, n, PAGE):
            block[i] = 1
        blocks.append(block)
        left -= n
    checksum = 0
    while time.monotonic() - t0 < args.seconds:
        # a little real work on the data, then rest: the demo must not hog shared cores
        for block in blocks[:4]:
            checksum = (checksum + block[len(block) // 2] + 1) % 1_000_003
        time.sleep(0.2)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    print(
        f"{os.path.basename(__file__)}: held {args.mb} MiB for {time.monotonic() - t0:.1f} s "
        f"(peak RSS {peak_mb} MiB, checksum {checksum})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
