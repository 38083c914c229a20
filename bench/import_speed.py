"""``harp import`` of 1,000,000 records: under 60 s and under 1 GiB of memory.

The input is real: the Cedar ``sacct --parsable2`` export
(cedar-2021.sacct.psv.gz, 115,043 jobs, in the traces folder) repeated with shifted
job ids until it holds the requested number of records, written gzip'd like a
site's export would be.  Building that file is not timed.  The import then
runs as the real command (``python -m harpd.cli.main import FILE --db DB``) in
a child process, so the figures are the command's own: wall time, records per
second, and the child's peak resident memory (``ru_maxrss``).  The file is
streamed: memory must not grow with the number of records.

    python bench/import_speed.py [--n 1000000] [--trace PATH | --traces DIR] [--dir DIR]
"""

from __future__ import annotations

import argparse
import gzip
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench._traces import trace_file  # noqa: E402

DEFAULT_TRACE = "cedar-2021.sacct.psv.gz"
TARGET_S = 60.0
TARGET_RATE = 1_000_000 / TARGET_S
TARGET_MIB = 1024.0


def build_input(trace: Path, n: int, out: Path) -> int:
    """Write ``n`` records: the trace's rows, again and again, ids shifted per copy."""
    written = 0
    copy = 0
    with gzip.open(out, "wt", compresslevel=1, encoding="utf-8", newline="") as dst:
        header_done = False
        while written < n:
            with gzip.open(trace, "rt", encoding="utf-8", newline="") as src:
                header = src.readline()
                if not header_done:
                    dst.write(header)
                    header_done = True
                for line in src:
                    if written >= n:
                        break
                    jid, sep, rest = line.partition("|")
                    base, dot, step = jid.partition(".")
                    if copy and base.isdigit():
                        base = str(int(base) + copy * 1_000_000_000)
                    dst.write(base + dot + step + sep + rest)
                    if not dot:
                        written += 1
            copy += 1
            if copy > 10_000:
                raise SystemExit(f"{trace}: no job rows to repeat")
    return written


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1_000_000, help="records to import (default 1000000)")
    ap.add_argument(
        "--trace", type=Path, help=f"sacct -P export to repeat (default: {DEFAULT_TRACE} in the traces folder)"
    )
    ap.add_argument("--traces", help="folder of the traces (default: $HARP_TRACES, else ../shared/traces)")
    ap.add_argument("--dir", help="work directory (default: a temp dir, removed after)")
    args = ap.parse_args()
    args.trace = trace_file("import_speed", DEFAULT_TRACE, args.trace, args.traces)
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="harp-import-bench-") as tmp:
        data = Path(tmp) / "history.sacct.psv.gz"
        db = Path(tmp) / "harp.db"
        t = time.monotonic()
        n = build_input(args.trace, args.n, data)
        print(f"input: {n:,} records, {data.stat().st_size / 1e6:.1f} MB gzip, built in {time.monotonic() - t:.1f} s")
        env = dict(os.environ)
        env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        before_ru = resource.getrusage(resource.RUSAGE_CHILDREN)
        before = before_ru.ru_maxrss
        t0 = time.monotonic()
        proc = subprocess.run(
            [sys.executable, "-m", "harpd.cli.main", "import", str(data), "--db", str(db), "--no-progress"],
            env=env,
            capture_output=True,
            text=True,
        )
        wall = time.monotonic() - t0
        ru = resource.getrusage(resource.RUSAGE_CHILDREN)
        peak_kib = ru.ru_maxrss
        cpu = (ru.ru_utime - before_ru.ru_utime) + (ru.ru_stime - before_ru.ru_stime)
        print(proc.stdout.strip())
        # CPU time shows the import's own cost when other work shares the cores
        print(
            f"import: {wall:.1f} s wall, {cpu:.1f} s CPU, "
            f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
        )
        if proc.returncode != 0:
            print(proc.stderr.strip(), file=sys.stderr)
            print(f"FIGURE import_speed: failed (exit {proc.returncode}) (target >= {TARGET_RATE:,.0f} records/s) FAIL")
            return 1
        peak_mib = max(peak_kib, before) / 1024.0
        rate = n / wall
        print(
            f"FIGURE import_1m_seconds: {wall * 1_000_000 / n:.1f} s per 1M records (target < {TARGET_S:.0f}) "
            f"{'PASS' if wall * 1_000_000 / n < TARGET_S else 'FAIL'}"
        )
        print(
            f"FIGURE import_peak_memory: {peak_mib:.0f} MiB (target < {TARGET_MIB:.0f}) "
            f"{'PASS' if peak_mib < TARGET_MIB else 'FAIL'}"
        )
        print(
            f"FIGURE import_speed: {rate:,.0f} records/s (target >= {TARGET_RATE:,.0f}) "
            f"{'PASS' if rate >= TARGET_RATE else 'FAIL'}"
        )
        return 0 if (rate >= TARGET_RATE and peak_mib < TARGET_MIB) else 1


if __name__ == "__main__":
    sys.exit(main())
