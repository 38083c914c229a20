"""The queue targets at high load: a trace's inter-arrival times compressed to 80-90% utilization.

Under heavy load one shaken copy of a trace can diverge from the others and
the five-copy means say little.  The scheduling literature tests
at high load by compressing the inter-arrival times; this runs
``harp replay TRACE --limits soft --schedule --compress F --replicas N`` and
prints, per policy, the utilization and the means with their standard
errors; harp's paired difference from the users' requests; and how the
paired means settle as copies are added: the copies after which the
running mean stays within two (final) standard errors of the N-copy mean,
and the relative standard error of the users' mean wait at 5 and N copies.

With ``--open-loop`` harp-soft keeps the replay's limits (decided on the
recorded timeline); by default the replay asks for each at its submission in
the simulated queue (closed loop) through the queue rule
(``harpd.predict.queue_policy``, on by default as in harpd), and
``--no-queue-rule`` decides it there without the rule.

    python bench/queue_load.py [--traces DIR] [--only KTH] [--compress F] [--replicas N] [--predict KEY=VALUE]
                               [--open-loop | --no-queue-rule]
"""
# bench: slow
# bench: timeout=3600

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from bench._traces import traces_folder  # noqa: E402
from bench.replay_targets import TIME_TRACES  # noqa: E402

FIGS = (("mean_wait_s", "wait"), ("mean_bounded_slowdown", "bsld"))


def settle(d: np.ndarray) -> int:
    """Copies after which the running mean of ``d`` stays within two final standard errors of the final mean."""
    n = len(d)
    if n < 3:
        return n
    final, se = float(d.mean()), float(d.std(ddof=1) / math.sqrt(n))
    run = np.cumsum(d) / np.arange(1, n + 1)
    outside = np.flatnonzero(np.abs(run - final) > 2 * se)
    return int(outside[-1]) + 2 if len(outside) else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", type=Path)
    ap.add_argument("--only", default="KTH", help="comma-separated trace names (default: KTH, the smallest)")
    ap.add_argument("--compress", type=float, default=0.8, help="inter-arrival factor (default 0.8)")
    ap.add_argument("--replicas", type=int, default=10)
    ap.add_argument(
        "--predict",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a [predict] setting for the replay (TOML value), e.g. soft_stake_tilt=0; repeatable",
    )
    ap.add_argument(
        "--open-loop", action="store_true", help="harp-soft on the recorded timeline (harp replay --open-loop)"
    )
    ap.add_argument("--no-queue-rule", action="store_true", help="harp-soft in the closed loop without the queue rule")
    args = ap.parse_args()
    names = [n for n in TIME_TRACES if n in args.only.split(",")]
    folder = traces_folder("queue_load", [TIME_TRACES[n] for n in names], args.traces)
    with tempfile.TemporaryDirectory() as tmp:
        cfg = Path(tmp) / "harp.toml"
        cfg.write_text(
            f'[store]\npath = "{Path(tmp) / "harp.db"}"\n[predict]\n' + "".join(f"{kv}\n" for kv in args.predict)
        )
        env = dict(os.environ, HARP_CONFIG=str(cfg))
        for name in names:
            path = folder / TIME_TRACES[name]
            if not path.exists() or not path.name.endswith(".swf.gz"):
                print(f"queue_load: {path.name}: needs an SWF trace (MaxProcs)", file=sys.stderr)
                continue
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
                "--compress",
                str(args.compress),
                "--replicas",
                str(args.replicas),
                *(["--open-loop"] if args.open_loop else []),
                *(["--no-queue-rule"] if args.no_queue_rule else []),
            ]
            t0 = time.perf_counter()
            proc = subprocess.run(argv, cwd=str(REPO), capture_output=True, text=True, env=env)
            if proc.returncode != 0:
                print(f"queue_load: {name}: {proc.stderr.strip()[-500:]}", file=sys.stderr)
                return 1
            q = json.loads(proc.stdout)["queue"]
            rows = {p["policy"]: p for p in q["policies"]}
            print(
                f"{name}: inter-arrivals x {args.compress:g}, {q['replicas']} copies, {q['procs']} processors, "
                f"harp-soft {q.get('soft_loop')} loop{' + queue rule' if q.get('queue_rule') else ''}, "
                f"{time.perf_counter() - t0:.0f}s"
            )
            for p in q["policies"]:
                print(
                    f"  {p['policy']:10} util {p['utilization']:.3f}  wait {p['mean_wait_s']:9,.0f} "
                    f"±{p['mean_wait_s_se'] or 0:7,.0f}  bsld {p['mean_bounded_slowdown']:8.2f} "
                    f"±{p['mean_bounded_slowdown_se'] or 0:6.2f}  kills {p['kills']}  ext {p['extensions']}"
                )
            u = rows["users"]
            for f, short in FIGS:
                per = np.array(u[f"{f}_copies"])
                rse5 = per[:5].std(ddof=1) / math.sqrt(5) / per[:5].mean() if len(per) >= 5 else float("nan")
                rsen = per.std(ddof=1) / math.sqrt(len(per)) / per.mean()
                print(
                    f"  users' mean {short}: relative standard error {rse5:.1%} at 5 copies, "
                    f"{rsen:.1%} at {len(per)}; copies {', '.join(f'{v:,.0f}' for v in per)}"
                )
            for pol in ("harp-soft", "harp-hard", "exact"):
                if pol not in rows:
                    continue
                for f, short in FIGS:
                    d = np.array(rows[pol][f"{f}_copies"]) / np.array(u[f"{f}_copies"]) - 1.0
                    se = d.std(ddof=1) / math.sqrt(len(d))
                    d5 = d[:5]
                    se5 = d5.std(ddof=1) / math.sqrt(len(d5))
                    ok = d.mean() <= 2 * se  # not above the users' within 2 SE
                    print(
                        f"FIGURE queue_load_{name}_{pol}_{short}_vs_users: {d.mean():+.4f} (target <= +2 SE) "
                        f"{'PASS' if ok else 'FAIL'} ±{se:.4f} over {len(d)} copies "
                        f"(5 copies: {d5.mean():+.4f} ±{se5:.4f}); settles after {settle(d)} copies"
                    )
            if "harp-soft" in rows and "exact" in rows:  # the second target: no worse than exact runtimes
                x = rows["exact"]
                for f, short in FIGS:
                    d = np.array(rows["harp-soft"][f"{f}_copies"]) / np.array(x[f"{f}_copies"]) - 1.0
                    se = d.std(ddof=1) / math.sqrt(len(d))
                    ok = d.mean() <= 2 * se
                    print(
                        f"FIGURE queue_load_{name}_harp-soft_{short}_vs_exact: {d.mean():+.4f} (target <= +2 SE) "
                        f"{'PASS' if ok else 'FAIL'} ±{se:.4f} over {len(d)} copies"
                    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
