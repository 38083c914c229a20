"""harp's cores for single-task jobs against the users' requests (issue 20 part 3), on the shared nf-core traces.

For nf-core chipseq and rnaseq (Nextflow traces with ``cpus`` and ``%cpu``,
in ``workflows/`` of the traces folder), replayed in submission order
(``harpd.evaluate.cores_replay``): core-hours reserved by the users and by
harp's cores rule for the tasks that asked for more than one CPU, read two
ways against the issue's "cut by at least half": harp's core-hours at most
half the users' (the literal reading), and harp removing at least half of
the excess the users reserved over what the tasks used; the share of those
tasks harp would have slowed (used more cores than given), target at most
5 %; and the clairvoyant floor (each task its own cores used, in whole
cores), the least any rule that slows no task could reserve: where the
floor is above a target, no such rule can reach it, and the line says so.  The Compute Canada export (cedar-2021) has no TotalCPU
column, so it has no cores figures.

    python bench/cores_targets.py [--traces DIR] [--alpha 0.05]
"""
# bench: timeout=300

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from bench._traces import traces_folder  # noqa: E402

TRACES = {"chipseq": "workflows/nf-core-chipseq.trace.csv.gz", "rnaseq": "workflows/nf-core-rnaseq.trace.csv.gz"}
SHARE = 0.5  # harp's core-hours reserved at most this share of the users'
SLOWED = 0.05  # at most this share of tasks slowed


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def main() -> int:
    from harpd.evaluate.cores_replay import replay_cores
    from harpd.traces.nextflow import NextflowReader

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", help="folder of the traces (default: $HARP_TRACES, else ../shared/traces)")
    ap.add_argument("--alpha", type=float, default=0.05, help="share of tasks allowed more cores than given")
    args = ap.parse_args()
    if not 0 < args.alpha < 1:
        print("cores_targets: --alpha must lie between 0 and 1", file=sys.stderr)
        return 2
    folder = traces_folder("cores_targets", TRACES.values(), args.traces)
    for name, rel in TRACES.items():
        path = folder / rel
        if not path.is_file():
            print(f"FIGURE cores_reserved_share_{name}: nan (target <= {SHARE}) FAIL trace missing")
            print(f"FIGURE cores_slowed_share_{name}: nan (target <= {SLOWED}) FAIL trace missing")
            continue
        r = replay_cores(NextflowReader(path), args.alpha)
        m = r.multi
        best = m.best_core_h / m.users_core_h if m.users_core_h else 1.0
        print(f"{name}: {m.jobs} of {r.all.jobs} tasks asked for more than one CPU; core-h reserved: users "
              f"{m.users_core_h:,.1f}, harp {m.harp_core_h:,.1f} ({m.changed} tasks given fewer cores); used "
              f"{m.used_core_h:,.1f}; clairvoyant {m.best_core_h:,.1f} ({best:.3f} of the users'); all tasks: users "
              f"{r.all.users_core_h:,.1f}, harp {r.all.harp_core_h:,.1f}, used {r.all.used_core_h:,.1f}")
        floor = "" if best <= SHARE else "; unreachable: the clairvoyant floor is above the target"
        print(f"FIGURE cores_reserved_share_{name}: {m.share:.3f} (target <= {SHARE}) {verdict(m.share <= SHARE)} "
              f"harp {m.harp_core_h:,.1f} / users {m.users_core_h:,.1f} core-h (clairvoyant floor {best:.3f}{floor})")
        excess = m.users_core_h - m.used_core_h
        cut = (m.users_core_h - m.harp_core_h) / excess if excess > 0 else 0.0
        best_cut = (m.users_core_h - m.best_core_h) / excess if excess > 0 else 0.0
        floor = "" if best_cut >= SHARE else "; unreachable: the clairvoyant floor removes less"
        print(f"FIGURE cores_excess_removed_{name}: {cut:.3f} (target >= {SHARE}) {verdict(cut >= SHARE)} of the "
              f"{excess:,.1f} core-h the users reserved over the tasks' use (clairvoyant floor {best_cut:.3f}{floor})")
        print(f"FIGURE cores_slowed_share_{name}: {m.slowed_share:.4f} (target <= {SLOWED}) "
              f"{verdict(m.slowed_share <= SLOWED)} {m.slowed} of {m.jobs} tasks used more cores than given")
    return 0


if __name__ == "__main__":
    sys.exit(main())
