"""What harp does to the queue on every shared time trace, from `harp replay --schedule`.

For each trace with requested times (KTH-SP2, CTC-SP2, HPC2N, Cedar) it runs
the real command (``--models request,harp --schedule --format json``) and
prints, per policy (users' requests, harp with hard limits, harp with soft
limits, exact runtimes), the mean and p95 wait, the mean bounded slowdown and
the utilization; then the queue's targets (the queue first: it is what a site deploys harp for):

* harp with soft limits and with hard limits: mean wait and mean bounded
  slowdown not above the users' own requests' within two standard errors;
* harp-soft's median over-reservation (its final limits) at most 0.5 of the
  users' (``--limits soft``'s harp row);

each as the paired relative difference from the users' row over the copies
of the trace `harp replay --schedule` simulates (input shaking, default 5:
one simulation alone is chaotic; ``harpd.simulate.shake``), with its
standard error and whether the difference is clear (more than two of them);
* the share of the users → exact gap each harp policy closes, and its median
  over the traces (goal for soft limits: at least half of the bounded
  slowdown's; hard limits are only to do no harm, their share is printed
  for comparison), or a note where exact runtimes do not beat the users'
  requests.

Machine size: the SWF ``MaxProcs`` header; for Cedar (a sacct export of part
of a larger cluster) the most cores its jobs held at once in the trace's own
schedule (the smallest machine that ran it), computed here.

With ``--reference-only`` it prints instead the rows the literature reports
(users' requests, exact runtimes, exact runtimes x 2) on each trace, without
harp, in a fraction of the time.

    python bench/queue_targets.py [--traces DIR] [--only KTH,CTC] [--json OUT] [--reference-only]

``QUEUE_REPLICAS=N`` sets the copies, ``QUEUE_CONFIG=harpd.toml`` the settings replayed.
"""
# bench: slow
# bench: timeout=3600

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from bench._traces import traces_folder  # noqa: E402
from bench.replay_targets import TIME_TRACES  # noqa: E402  the same four traces

FIGS = (("mean_wait_s", "wait"), ("mean_bounded_slowdown", "bsld"))


def peak_cores(path: Path) -> int:
    """Most cores held at once in the trace's recorded schedule (ends before starts at one instant)."""
    from harpd.traces import read_trace

    ev: list[tuple[float, int]] = []
    for r in read_trace(path):
        if r.start_time is None or r.end_time is None:
            continue
        c = r.alloc_cpus or r.req_cpus or 1
        ev += [(r.start_time, c), (r.end_time, -c)]
    ev.sort()
    held = peak = 0
    for _, d in ev:
        held += d
        peak = max(peak, held)
    return peak


def reference(name: str, path: Path, procs: int | None) -> None:
    """The literature's rows without harp: users, exact, exact x 2 (Mu'alem & Feitelson), in-process."""
    import numpy as np

    from harpd.evaluate.schedule_simulation import policies, workload_of
    from harpd.replay.dataset import prepare, read_trace
    from harpd.simulate import LimitPolicy, simulate
    from harpd.traces.swf import machine_size

    procs = procs or machine_size(path)
    prep = prepare(read_trace(path), "time")
    pols = policies(prep, None, None) + [LimitPolicy(np.maximum(2 * prep.need, 1.0), "hard", None, "exact-x2")]
    work = workload_of(prep)
    for pol in pols:
        m = simulate(work, pol, procs).summary()
        print(
            f"reference {name} {m.policy}: mean wait {m.mean_wait_s:.0f} s, mean bsld "
            f"{m.mean_bounded_slowdown:.2f} ({m.jobs} jobs, {procs} processors)",
            flush=True,
        )


def schedule(path: Path, procs: int | None, env: dict[str, str]) -> dict | None:
    argv = [
        sys.executable,
        "-m",
        "harpd.cli.main",
        "replay",
        str(path),
        "--format",
        "json",
        "--quiet",
        "--models",
        "request,harp",
        "--limits",
        "soft",
        "--schedule",
    ]
    if os.environ.get("QUEUE_REPLICAS"):
        argv += ["--replicas", os.environ["QUEUE_REPLICAS"]]
    if os.environ.get("QUEUE_CONFIG"):  # a harpd.toml of settings to try (``--config``)
        argv += ["--config", os.environ["QUEUE_CONFIG"]]
    if procs:
        argv += ["--procs", str(procs)]
    t0 = time.perf_counter()
    proc = subprocess.run(argv, cwd=str(REPO), capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        print(f"queue_targets: {path.name}: {proc.stderr.strip()[-500:]}", file=sys.stderr)
        return None
    rep = json.loads(proc.stdout)
    print(f"{path.name}: {rep['jobs']} jobs, {time.perf_counter() - t0:.0f}s", flush=True)
    return rep


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.0%}"


def _print_policies(q: dict) -> None:
    """One trace's queue table: each policy's waits, slowdown, utilisation, kills and extensions."""
    print(
        f"  {'policy':10} {'mean wait s':>16} {'p95 wait s':>12} {'mean bsld':>13} {'util':>6} "
        f"{'kills':>6} {'ext':>6} {'sim s':>6}   (means over {q['replicas']} copies, ± standard error)"
    )
    for p in q["policies"]:
        se_w, se_b = p.get("mean_wait_s_se") or 0.0, p.get("mean_bounded_slowdown_se") or 0.0
        print(
            f"  {p['policy']:10} {p['mean_wait_s']:10,.0f} ±{se_w:4,.0f} {p['p95_wait_s']:12,.0f} "
            f"{p['mean_bounded_slowdown']:7.2f} ±{se_b:4.2f} {p['utilization']:6.3f} {p['kills']:6d} "
            f"{p['extensions']:6d} {p['seconds']:6.1f}"
        )


def _check_targets(name: str, q: dict) -> int:
    """The target's FIGURE lines for one trace (not above the users' within 2 standard errors, in either
    mode); returns how many missed it."""
    fails = 0
    rows = {p["policy"]: p for p in q["policies"]}
    vs = q.get("vs_users") or {}
    for pol, short_pol in (("harp-soft", "soft"), ("harp-hard", "hard")):
        if pol not in rows:
            print(f"queue_targets: {name}: no {pol} row ({'; '.join(q['notes'])})")
            continue
        for f, short in FIGS:
            c = vs[pol][f]
            d = c["rel_diff"]
            ok = d is not None and d <= 2 * (c["se"] or 0.0)
            fails += not ok
            se = "" if c["se"] is None else f" ±{c['se']:.4f}"
            how = f"{verdict(ok)} paired relative difference over {q['replicas']} copies: {c['verdict']}"
            print(f"FIGURE queue_{name}_{short_pol}_{short}_vs_users: {d:+.4f}{se} (target <= 2 SE) {how}")
    return fails


def _print_harp(rep: dict, overs: list[float]) -> None:
    """harp-soft's over-reservation against the users' requests (added to ``overs``), when the replay gave it."""
    h = {m["model"]: m for m in rep["models"]}.get("harp") or {}
    if h.get("over_vs_request") is None:
        return
    overs.append(h["over_vs_request"])
    print(
        f"  harp-soft over-reservation (final limits) vs the users': {h['over_vs_request']:.3f}, "
        f"{h.get('extended_share') or 0:.1%} of jobs extended"
    )
    if h.get("kept_over_vs_request") is not None:
        print(
            f"    of it in the {h['kept_share']:.1%} of jobs harp kept at their request: "
            f"{h['kept_over_vs_request']:.3f}, of which {h['kept_early_over_vs_request']:.3f} "
            "in runs that used under a tenth of it"
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", type=Path, help="folder of the traces (default: $HARP_TRACES, else ../shared/traces)")
    ap.add_argument("--only", help="comma-separated trace names (default: all)")
    ap.add_argument("--json", type=Path, help="also write every queue section here")
    ap.add_argument(
        "--reference-only",
        action="store_true",
        help="only the literature's rows (users, exact, exact x 2), without harp's replays",
    )
    args = ap.parse_args()
    names = [n for n in TIME_TRACES if not args.only or n in args.only.split(",")]
    folder = traces_folder("queue_targets", [TIME_TRACES[n] for n in names], args.traces)
    fails = 0
    gaps: dict[str, list[float]] = {"harp-hard": [], "harp-soft": []}
    out: dict[str, dict] = {}
    overs: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        # the figures `harp replay --schedule` saves for `harp report` go to a scratch store folder
        cfg = Path(tmp) / "harp.toml"
        cfg.write_text(f'[store]\npath = "{Path(tmp) / "harp.db"}"\n')
        env = dict(os.environ, HARP_CONFIG=str(cfg))
        for name in names:
            path = folder / TIME_TRACES[name]
            if not path.exists():
                print(f"queue_targets: {path} not found, skipped", file=sys.stderr)
                continue
            procs = None if path.name.endswith(".swf.gz") else peak_cores(path)
            if args.reference_only:
                reference(name, path, procs)
                continue
            rep = schedule(path, procs, env)
            if rep is None:
                fails += 1
                continue
            q = rep["queue"]
            out[name] = q
            print(f"  {name}: {q['procs']} processors{' (peak cores held in the trace)' if procs else ' (MaxProcs)'}")
            _print_policies(q)
            fails += _check_targets(name, q)
            for pol, g in q["gap_closed"].items():
                for f, short in FIGS:
                    print(
                        f"  {pol} closes {_pct(g[f])} of the users -> exact gap in {short}"
                        + ("" if g[f] is not None else " (exact runtimes do not beat the users' requests)")
                    )
                if g["mean_bounded_slowdown"] is not None:
                    gaps[pol].append(g["mean_bounded_slowdown"])
            for n in q["notes"]:
                print(f"  note: {n}")
            _print_harp(rep, overs)
            for line in (rep.get("verdict") or {}).get("queue") or []:
                print(f"  {line}")
    for pol, vals in gaps.items():
        if not vals:
            continue
        med = statistics.median(vals)
        if pol == "harp-soft":  # the target is soft limits'; hard limits are to do no harm, compared only
            print(
                f"FIGURE queue_{pol}_gap_closed_bsld_median: {med:.0%} (target >= 50%) {verdict(med >= 0.5)} "
                f"over {len(vals)} trace(s)"
            )
        else:
            print(f"  {pol} closes {med:.0%} of the bsld gap on the median trace (no target: do no harm)")
    if overs:
        med = statistics.median(overs)
        print(
            f"FIGURE queue_soft_over_reservation_median: {med:.3f} (target <= 0.5) {verdict(med <= 0.5)} "
            f"over {len(overs)} trace(s)"
        )
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
