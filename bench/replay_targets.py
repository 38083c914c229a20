"""harp's accuracy targets on each shared trace (under-prediction, over-reservation, use): `harp replay --bounds`.

For each trace with requests (KTH-SP2, CTC-SP2, HPC2N, Cedar): harp's
under-prediction rate, its over-reservation and consumption against the
users' own requests; then the over-reservation on the median trace; for
METACENTRUM (used memory only) the memory under-prediction rate and
reserved/used.  Each over-reservation figure carries, after its verdict, what
the reference rules of ``harpd/replay/bounds.py`` reach on the same trace
(clairvoyant per-template allocations, future included), so a failing
figure says whether the trace could have allowed more.

Then the soft-limit targets (`harp replay --limits soft`: harpd
extends jobs up to the user's request): harp-caused kills 0, consumed vs
users <= 1.00, over-reservation of the final limit <= 0.8 on every trace and
<= 0.5 on the median trace, at most 10% of the jobs (all pass through harp)
extended; each
over-reservation figure carries the best soft reference rule within the
extension budget.

    python bench/replay_targets.py [--traces DIR] [--only KTH,CTC] [--limits hard,soft] [--json OUT]
"""
# bench: slow
# bench: timeout=3600

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from bench._traces import traces_folder  # noqa: E402

TIME_TRACES = {
    "KTH": "KTH-SP2-1996-2.1-cln.swf.gz",
    "CTC": "CTC-SP2-1996-3.1-cln.swf.gz",
    "HPC2N": "HPC2N-2002-2.2-cln.swf.gz",
    "Cedar": "cedar-2021.sacct.psv.gz",
}
MEM_TRACE = ("METACENTRUM", "METACENTRUM-2009-2.swf.gz")
ALPHA = 0.05


SOFT_BUDGET = 0.10


def replay(path: Path, resource: str, limits: str = "hard") -> dict | None:
    models = "request,tsafrir,alea,gbm,harp" if limits == "hard" else "request,harp"
    argv = [
        sys.executable,
        "-m",
        "harpd.cli.main",
        "replay",
        str(path),
        "--format",
        "json",
        "--quiet",
        "--resource",
        resource,
        "--models",
        models,
        "--limits",
        limits,
    ]
    if resource == "time":
        argv.append("--bounds")
    t0 = time.perf_counter()
    proc = subprocess.run(argv, cwd=str(REPO), capture_output=True, text=True)
    if proc.returncode != 0:
        print(f"replay_targets: {path.name}: {proc.stderr.strip()[-500:]}", file=sys.stderr)
        return None
    rep = json.loads(proc.stdout)
    print(f"{path.name}: {rep['jobs']} jobs, {limits} limits, {time.perf_counter() - t0:.0f}s", flush=True)
    return rep


def rows(rep: dict) -> dict[str, dict]:
    return {m["model"]: m for m in rep["models"]}


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def _f(v: float | None, fmt: str = ".3f") -> str:
    return "-" if v is None else format(v, fmt)


def print_table(name: str, rep: dict) -> None:
    print(f"  {'model':24} {'under':>7} {'over vs users':>14} {'consumed vs users':>18} {'resv/used':>10}")
    for m in rep["models"]:
        print(
            f"  {m['model']:24} {_f(m['under_rate'], '.2%'):>7} {_f(m.get('over_vs_request')):>14} "
            f"{_f(m.get('consumed_vs_request')):>18} {_f(m.get('reserved_over_used')):>10}"
        )


def best_bound(r: dict[str, dict]) -> tuple[str, float] | None:
    """The lowest over-reservation among reference rules that keep both budgets."""
    ok = [
        (m["over_vs_request"], k)
        for k, m in r.items()
        if k.startswith("bound:clairvoyant") and m["under_rate"] <= ALPHA and (m["consumed_vs_request"] or 9) <= 1.05
    ]
    if not ok:
        return None
    v, k = min(ok)
    return k.removeprefix("bound:"), v


def print_soft_table(rep: dict) -> None:
    print(
        f"  {'model':26} {'changed':>8} {'extended':>9} {'ext/job':>8} {'kills':>6} {'over vs users':>14} "
        f"{'planned wrongly vs users':>25}"
    )
    for m in rep["models"]:
        print(
            f"  {m['model']:26} {_f(m['changed'], '.1%'):>8} {_f(m.get('extended_share'), '.1%'):>9} "
            f"{_f(m.get('extensions_per_job'), '.2f'):>8} {m.get('harp_kills')!s:>6} "
            f"{_f(m.get('over_vs_request')):>14} {_f(m.get('planned_wrongly_vs_request')):>25}"
        )


def best_soft_bound(r: dict[str, dict]) -> tuple[str, float] | None:
    """The lowest final over-reservation among soft reference rules within the extension budget."""
    ok = [
        (m["over_vs_request"], k)
        for k, m in r.items()
        if k.startswith("bound:") and (m.get("extended_share") or 0.0) <= SOFT_BUDGET
    ]
    if not ok:
        return None
    v, k = min(ok)
    return k.removeprefix("bound:"), v


def soft_figures(folder: Path, only: set[str] | None, reports: dict[str, dict]) -> bool:
    """Replay every time trace under soft limits and print its FIGURE lines; False if one failed."""
    ok = True
    over: dict[str, float] = {}
    for name, file in TIME_TRACES.items():
        if only and name not in only:
            continue
        path = folder / file
        rep = replay(path, "time", "soft") if path.exists() else None
        if rep is None:
            print(f"FIGURE soft_harp_kills_{name}: nan (target == 0) FAIL trace missing or replay failed")
            ok = False
            continue
        reports[f"{name}-soft"] = rep
        r = rows(rep)
        h = r["harp"]
        print_soft_table(rep)
        bb = best_soft_bound(r)
        note = (
            f"best reference rule within {SOFT_BUDGET:.0%} extended: {bb[0]} {bb[1]:.3f}"
            if bb
            else f"no reference rule within {SOFT_BUDGET:.0%} extended"
        )
        over[name] = h["over_vs_request"]
        print(f"FIGURE soft_harp_kills_{name}: {h['harp_kills']} (target == 0) {verdict(h['harp_kills'] == 0)}")
        print(
            f"FIGURE soft_consumed_vs_users_{name}: {h['consumed_vs_request']:.3f} (target <= 1.00) "
            f"{verdict(h['consumed_vs_request'] <= 1.0 + 1e-9)}"
        )
        print(
            f"FIGURE soft_final_over_vs_users_{name}: {h['over_vs_request']:.3f} (target <= 0.8) "
            f"{verdict(h['over_vs_request'] <= 0.8)} {note}"
        )
        print(
            f"FIGURE soft_extended_share_{name}: {h['extended_share']:.4f} (target <= {SOFT_BUDGET}) "
            f"{verdict(h['extended_share'] <= SOFT_BUDGET)} {_f(h.get('extended_share_changed'), '.1%')} of the "
            f"jobs harp changed, {h['extensions_per_job']:.2f} extensions per changed job; "
            f"planned wrongly vs users {_f(h.get('planned_wrongly_vs_request'))}"
        )
    if len(over) == len(TIME_TRACES):
        med = statistics.median(over.values())
        print(
            f"FIGURE soft_final_over_vs_users_median_trace: {med:.3f} (target <= 0.5) {verdict(med <= 0.5)} "
            f"median of {', '.join(f'{k} {v:.3f}' for k, v in over.items())}"
        )
    return ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", help="folder of the traces (default: $HARP_TRACES, else ../shared/traces)")
    ap.add_argument("--only", help="comma-separated trace names (KTH,CTC,HPC2N,Cedar,METACENTRUM)")
    ap.add_argument("--json", metavar="OUT", help="also write every replay's JSON report here")
    ap.add_argument("--limits", default="hard,soft", help="which limit modes to check (default: %(default)s)")
    args = ap.parse_args()
    modes = set(args.limits.split(","))
    only = set(args.only.split(",")) if args.only else None
    wanted = [f for n, f in [*TIME_TRACES.items(), MEM_TRACE] if not only or n in only]
    folder = traces_folder("replay_targets", wanted, args.traces)
    reports: dict[str, dict] = {}
    failed = False
    harp_over: dict[str, float] = {}
    bound_over: dict[str, float] = {}
    for name, file in TIME_TRACES.items():
        if (only and name not in only) or "hard" not in modes:
            continue
        path = folder / file
        rep = replay(path, "time") if path.exists() else None
        if rep is None:
            print(f"FIGURE under_rate_{name}: nan (target <= {ALPHA}) FAIL trace missing or replay failed")
            failed = True
            continue
        reports[name] = rep
        r = rows(rep)
        h = r["harp"]
        print_table(name, rep)
        bb = best_bound(r)
        note = (
            f"best clairvoyant rule within budgets: {bb[0]} {bb[1]:.3f}" if bb else "no clairvoyant rule within budgets"
        )
        harp_over[name] = h["over_vs_request"]
        if bb:
            bound_over[name] = bb[1]
        print(
            f"FIGURE under_rate_{name}: {h['under_rate']:.4f} (target <= {ALPHA}) {verdict(h['under_rate'] <= ALPHA)}"
        )
        print(
            f"FIGURE over_vs_users_{name}: {h['over_vs_request']:.3f} (target <= 1) "
            f"{verdict(h['over_vs_request'] <= 1.0)} {note}"
        )
        print(
            f"FIGURE consumed_vs_users_{name}: {h['consumed_vs_request']:.3f} (target <= 1.05) "
            f"{verdict(h['consumed_vs_request'] <= 1.05)}"
        )
    if "soft" in modes and not soft_figures(folder, only, reports):
        failed = True
    if len(harp_over) == len(TIME_TRACES):
        med = statistics.median(harp_over.values())
        bmed = statistics.median(bound_over.values()) if len(bound_over) == len(TIME_TRACES) else float("nan")
        print(
            f"FIGURE over_vs_users_median_trace: {med:.3f} (target <= 0.5) {verdict(med <= 0.5)} "
            f"median of {', '.join(f'{k} {v:.3f}' for k, v in harp_over.items())}; "
            f"the clairvoyant rules' median: {bmed:.3f}"
        )
    if "hard" in modes and (not only or MEM_TRACE[0] in only):
        path = folder / MEM_TRACE[1]
        rep = replay(path, "mem") if path.exists() else None
        if rep is None:
            print(f"FIGURE under_rate_mem_{MEM_TRACE[0]}: nan (target <= {ALPHA}) FAIL trace missing or replay failed")
            failed = True
        else:
            reports[MEM_TRACE[0]] = rep
            print_table(MEM_TRACE[0], rep)
            h = rows(rep)["harp"]
            print(
                f"FIGURE under_rate_mem_{MEM_TRACE[0]}: {h['under_rate']:.4f} (target <= {ALPHA}) "
                f"{verdict(h['under_rate'] <= ALPHA)} reserved/used {_f(h.get('reserved_over_used'), '.2f')}"
            )
    if args.json:
        Path(args.json).write_text(json.dumps(reports, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
