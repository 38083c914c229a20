"""``harp replay TRACE``: what harp would have done on a real trace, model by model.

Prints one row per model plus the users' own requests, with the harp metric
and cost (docs/metrics.md).  ``--format json`` prints the same figures for
scripts.  Progress goes to stderr so stdout stays machine-readable.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time

NAME = "replay"
HELP = "replay a trace (SWF or sacct export) through harp's models and print the metric table"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("trace", metavar="TRACE", help="SWF file or `sacct --parsable2` export (gzip or plain)")
    p.add_argument("--format", choices=["table", "json"], default="table")
    p.add_argument("--resource", choices=["time", "mem"], default="time")
    p.add_argument("--limit", type=int, metavar="N", help="only the first N jobs (in submission order)")
    p.add_argument("--models", metavar="A,B", default="request,tsafrir,alea,gbm,harp",
                   help="comma-separated predictors (default: %(default)s)")
    p.add_argument("--retrain-every", type=int, metavar="N",
                   help="retrain after N new outcomes (default: 1/20 of the trace, at least 500)")
    p.add_argument("--threads", type=int, default=1, metavar="N",
                   help="threads for model training (default 1: best on a shared machine)")
    p.add_argument("--bounds", action="store_true",
                   help="add reference rows: what clairvoyant per-template rules (future included) and a simple "
                        "history rule reach on this trace (harpd/predict/bounds.py)")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")


def _fail(msg: str):
    from harpd.cli.main import CliError

    raise CliError(msg)


def run(args: argparse.Namespace) -> int:
    from threadpoolctl import threadpool_limits

    from harpd.config import ConfigError, load_settings
    from harpd.models.registry import UnknownPredictor, available
    from harpd.predict.allocation import Guard
    from harpd.predict.dataset import ReplayError, prepare, read_trace
    from harpd.predict.replay import ReplayConfig
    from harpd.predict.replay import run as replay_run
    from harpd.traces.swf import TraceFormatError

    if args.limit is not None and args.limit < 1:
        _fail("--limit must be a positive number of jobs")
    if args.retrain_every is not None and args.retrain_every < 1:
        _fail("--retrain-every must be a positive number of outcomes")
    if args.threads < 1:
        _fail("--threads must be at least 1")
    models = tuple(m.strip() for m in args.models.split(",") if m.strip())
    known = set(available())
    bad = [m for m in models if m not in known]
    if bad or not models:
        _fail(f"unknown model(s) {', '.join(bad) or '(none)'}; available: {', '.join(sorted(known))}")
    try:
        settings = load_settings(getattr(args, "config", None))
    except ConfigError as exc:
        _fail(str(exc))
    pr = settings.predict
    alpha = pr.alpha_time if args.resource == "time" else pr.alpha_mem
    say = (lambda m: None) if args.quiet else (lambda m: print(f"harp replay: {m}", file=sys.stderr, flush=True))
    t0 = time.perf_counter()
    try:
        say(f"reading {args.trace}")
        prep = prepare(read_trace(args.trace), args.resource, args.limit, keep_templates=args.bounds)
        say(f"{prep.n} jobs, features built in {time.perf_counter() - t0:.1f}s")
        cfg = ReplayConfig(
            alpha=alpha,
            guard=Guard.from_settings(pr, args.resource, settings.recovery.max_attempts),
            retrain_every=args.retrain_every or max(settings.retrain.after_n_outcomes, prep.n // 20),
            max_attempts=settings.recovery.max_attempts,
            models=models,
            waste_budget=pr.waste_budget,
            bounds=args.bounds,
        )
        with threadpool_limits(args.threads):
            res = replay_run(prep, cfg, progress=say)
    except (ReplayError, TraceFormatError, UnknownPredictor) as exc:
        _fail(str(exc))
    except OSError as exc:
        _fail(f"{args.trace}: {exc.strerror or exc}")
    total = time.perf_counter() - t0
    report = build_report(res, args.trace, alpha, total)
    if args.format == "json":
        json.dump(report, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(render_table(report))
    return 0


def check_targets(rows: dict[str, dict], alpha: float, relative: bool) -> dict[str, dict]:
    """harp's accuracy targets, checked on its row (the users' row is the reference)."""
    h = rows.get("harp")
    if h is None:
        return {}
    out = {"under_rate": {"value": h["under_rate"], "target": f"<= {alpha:g}", "pass": h["under_rate"] <= alpha}}
    if relative:
        ov = h.get("over_vs_request")
        co = h.get("consumed_vs_request")
        out["over_reservation_vs_users"] = {"value": ov, "target": "<= 1 (never more than the users')",
                                            "pass": ov is not None and ov <= 1.0}
        out["over_reservation_halved"] = {"value": ov, "target": "<= 0.5 on the median trace",
                                          "pass": ov is not None and ov <= 0.5}
        out["consumed_vs_users"] = {"value": co, "target": "<= 1.05",
                                    "pass": co is not None and co <= 1.05}
    return out


def build_report(res, trace: str, alpha: float, seconds: float) -> dict:
    prep = res.prepared
    rows = {m.model: m.to_dict() for m in res.metrics}
    unit = ("core-hours", 3600.0) if prep.resource == "time" else ("GiB", 1024.0)
    return {
        "trace": str(trace),
        "source": prep.source,
        "resource": prep.resource,
        "relative": prep.has_requests,
        "jobs": prep.n,
        "skipped": {k: v for k, v in prep.skipped.items() if v},
        "retrains": res.retrains,
        "seconds": round(seconds, 2),
        "alpha": alpha,
        "weight": "cores" if prep.resource == "time" else "none",
        "unit": unit[0],
        "unit_scale": unit[1],
        "models": list(rows.values()),
        "targets": check_targets(rows, alpha, prep.has_requests),
        "notes": res.notes,
    }


def _f(v, fmt: str) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    return format(v, fmt)


def render_table(rep: dict) -> str:
    scale = rep["unit_scale"]
    head = ["model", "jobs", "changed", "under", "lost", "resv/used", f"over-res {rep['unit']}",
            "vs users", "consumed/used", "vs users", "score"]
    lines = [head]
    for m in rep["models"]:
        name = "users' requests" if m["model"] == "request" else m["model"]
        lines.append([
            name, str(m["jobs"]), _f(m["changed"], ".1%"), _f(m["under_rate"], ".2%"), str(m["lost"]),
            _f(m["reserved_over_used"], ".3f"), _f(m["over_reservation"] / scale, ",.0f"),
            _f(m["over_vs_request"], ".3f"), _f(m["consumed_over_used"], ".3f"),
            _f(m["consumed_vs_request"], ".3f"), _f(m["score"], ".3f"),
        ])
    widths = [max(len(r[i]) for r in lines) for i in range(len(head))]
    out = [f"{rep['source']}: {rep['jobs']} jobs, resource {rep['resource']}, {rep['retrains']} retrains, "
           f"{rep['seconds']:.0f}s" + (f" (skipped: {rep['skipped']})" if rep["skipped"] else "")]
    for k, r in enumerate(lines):
        out.append("  ".join(c.ljust(widths[i]) if i == 0 else c.rjust(widths[i]) for i, c in enumerate(r)))
        if k == 0:
            out.append("  ".join("-" * w for w in widths))
    if rep["targets"]:
        out.append("")
        for name, t in rep["targets"].items():
            out.append(f"target {name}: {_f(t['value'], '.4f')} ({t['target']}) {'PASS' if t['pass'] else 'FAIL'}")
    out.append("")
    out.append("under: share of jobs that fit their request but run out under harp's first allocation; "
               "score: lower is better (docs/metrics.md)")
    return "\n".join(out) + "\n"
