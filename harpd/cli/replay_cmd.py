"""``harp replay TRACE``: what harp would have done on a real trace, model by model.

Prints a plain verdict first (harp against the users' own requests:
reservation saved, jobs killed or extended, consumption; ``replay_verdict``),
then one row per model plus the users' own requests, with the harp metric
and cost (docs/metrics.md).  ``--format json`` prints the same figures for
scripts.  Progress goes to stderr so stdout stays machine-readable.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from typing import TYPE_CHECKING, cast

from harpd.cli.replay_report import ReplayReport, TargetCheck, finite_or_none

if TYPE_CHECKING:
    from harpd.evaluate.workflow_replay import WorkflowFigures
    from harpd.replay.metric import ModelMetrics
    from harpd.report.queue_figures import GapSize, QueueFigures

NAME = "replay"
HELP = (
    "what harp would have saved and cost on a past trace (SWF, sacct export or Nextflow trace), against the "
    "users' own requests"
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    from harpd.cli import replay_workflow

    p.add_argument(
        "trace", metavar="TRACE", help="SWF file, `sacct --parsable2` export or Nextflow trace (gzip or plain)"
    )
    p.add_argument("--format", choices=["table", "json"], default="table")
    p.add_argument(
        "--resource",
        choices=["time", "mem", "cpus"],
        default="time",
        help="cpus: core-hours reserved by users and by harp's cores rule, and the share of jobs it "
        "would slow (needs TotalCPU or Nextflow's %%cpu)",
    )
    p.add_argument("--limit", type=int, metavar="N", help="only the first N jobs (in submission order)")
    p.add_argument(
        "--models",
        metavar="A,B",
        default="request,tsafrir,alea,gbm,harp",
        help="comma-separated predictors (default: %(default)s)",
    )
    p.add_argument(
        "--retrain-every",
        type=int,
        metavar="N",
        help="retrain after N new outcomes (default: 1/20 of the trace, at least 500)",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        metavar="N",
        help="threads for model training (default 1: best on a shared machine)",
    )
    p.add_argument(
        "--bounds",
        action="store_true",
        help="add reference rows: what clairvoyant per-template rules (future included) and a simple "
        "history rule reach on this trace (harpd/replay/bounds.py)",
    )
    # --no-progress as in `harp import`; --quiet, the older name, still works
    p.add_argument("--no-progress", "--quiet", dest="quiet", action="store_true", help="no progress on stderr")
    p.add_argument(
        "--limits",
        choices=["hard", "soft"],
        default="hard",
        help="hard: harp's limit is the kill time (an unprivileged harpd, the default); soft: a "
        "privileged harpd extends jobs up to the user's request, decided again at each job's "
        "start (docs/metrics.md, 'Soft limits'; time only)",
    )
    p.add_argument(
        "--schedule",
        action="store_true",
        help="also simulate the queue (FCFS + EASY backfilling) under the users' requests, harp's hard "
        "and soft limits and the exact runtimes: wait, bounded slowdown, utilization (docs/metrics.md)",
    )
    p.add_argument(
        "--procs",
        type=int,
        metavar="N",
        help="processors of the simulated machine for --schedule (default: the SWF MaxProcs/MaxNodes "
        "header; required for sacct exports)",
    )
    p.add_argument(
        "--replicas",
        type=int,
        metavar="N",
        default=5,
        help="--schedule: average the queue figures over N copies of the trace, the first as recorded, "
        "the others shaken (one simulation alone is chaotic; docs/metrics.md, 'Queue'; "
        "default: %(default)s, 1 for the recorded trace only)",
    )
    p.add_argument(
        "--compress",
        type=float,
        metavar="F",
        default=1.0,
        help="--schedule: multiply every submission time by F (0 < F <= 1) to load the simulated machine "
        "more, as the scheduling literature does (docs/metrics.md, 'Queue', high load)",
    )
    p.add_argument(
        "--open-loop",
        action="store_true",
        help="--schedule: give harp-soft the replay's limits as they are, decided on the recorded timeline "
        "(the default decides each at its submission from the simulated queue: a closed loop)",
    )
    p.add_argument(
        "--queue-rule",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="--schedule: decide harp-soft in the closed loop through the queue rule, or not (behind waiting work "
        "that outlasts the job's request only a cut to a quarter of it or less stands; harpd.predict.queue_policy); "
        "default: as harpd.toml's predict.queue_rule, on unless the site turned it off (docs/metrics.md)",
    )
    p.add_argument(
        "--shake",
        type=float,
        metavar="SECONDS",
        default=60.0,
        help="--schedule: move each submission of a shaken copy by up to this many seconds either way "
        "(default: %(default)g)",
    )
    replay_workflow.add_arguments(p)


def _fail(msg: str):
    from harpd.cli.main import CliError

    raise CliError(msg)


def run(args: argparse.Namespace) -> int:
    from threadpoolctl import threadpool_limits

    from harpd.config import ConfigError, load_settings
    from harpd.models.registry import UnknownPredictor, available
    from harpd.replay.dataset import ReplayError, prepare, read_trace
    from harpd.replay.engine import ReplayConfig
    from harpd.replay.engine import run as replay_run
    from harpd.traces.swf import TraceFormatError

    if args.limit is not None and args.limit < 1:
        _fail("--limit must be a positive number of jobs")
    if args.retrain_every is not None and args.retrain_every < 1:
        _fail("--retrain-every must be a positive number of outcomes")
    if args.threads < 1:
        _fail("--threads must be at least 1")
    if args.limits == "soft" and args.resource != "time":
        _fail("--limits soft extends running jobs' time limits; use it with --resource time")
    from harpd.cli import replay_workflow

    problem = replay_workflow.check(args)
    if problem:
        _fail(problem)
    if args.protocol == "sizey":
        return _workflow_only(args)
    if args.resource == "cpus":
        return _cores_only(args)
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
    # the site's harpd decides with the queue rule (predict.queue_rule): the closed loop does too
    rule = pr.queue_rule if args.queue_rule is None else args.queue_rule
    args.closed_loop_rule = bool(rule and args.schedule and not args.open_loop)
    alpha = pr.alpha_time if args.resource == "time" else pr.alpha_mem
    say = (lambda m: None) if args.quiet else (lambda m: print(f"harp replay: {m}", file=sys.stderr, flush=True))
    procs = _machine_size(args)
    t0 = time.perf_counter()
    try:
        say(f"reading {args.trace}")
        prep = prepare(
            read_trace(args.trace),
            args.resource,
            args.limit,
            keep_templates=args.bounds or args.schedule or args.limits == "soft",
        )
        say(f"{prep.n} jobs, features built in {time.perf_counter() - t0:.1f}s")
        cfg = ReplayConfig.of_site(
            settings,
            args.resource,
            args.limits,
            retrain_every=args.retrain_every or max(settings.retrain.after_n_outcomes, prep.n // 20),
            models=models,
            bounds=args.bounds,
        )
        with threadpool_limits(args.threads):
            res = replay_run(prep, cfg, progress=say)
    except (ReplayError, TraceFormatError, UnknownPredictor) as exc:
        _fail(str(exc))
    except OSError as exc:
        _fail(f"{args.trace}: {exc.strerror or exc}")
    queue = None
    if procs is not None:
        with threadpool_limits(args.threads):
            queue = _schedule(args, prep, cfg, res, procs, say)
    workflow = _workflow(args) if args.resource == "mem" and replay_workflow.is_nextflow(args.trace) else None
    total = time.perf_counter() - t0
    report = build_report(res, args.trace, alpha, total)
    if queue is not None:
        from harpd.cli.replay_verdict import with_queue

        # the queue is the outcome, the over-reservation its proxy: its verdict decides the headline
        assert report.verdict is not None  # build_report always judges
        report = dataclasses.replace(report, queue=queue, verdict=with_queue(report.verdict, queue, res.limits))
    if workflow is not None:
        report = dataclasses.replace(report, workflow=workflow)
    if args.format == "json":
        json.dump(report.to_dict(), sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(render_table(report))
        if queue is not None:
            sys.stdout.write(render_queue(queue))
        if workflow is not None:
            sys.stdout.write(replay_workflow.render(workflow))
    return 0


def _workflow(args: argparse.Namespace) -> WorkflowFigures:
    """Sizey's wastage of a Nextflow trace (harpd.evaluate.workflow_replay), errors as one line."""
    from harpd.cli import replay_workflow
    from harpd.evaluate.workflow_replay import WorkflowReplayError
    from harpd.traces import TraceFormatError

    try:
        return replay_workflow.report(args.trace, args.protocol, args.seed, args.decide_at)
    except (WorkflowReplayError, TraceFormatError) as exc:
        _fail(str(exc))
    raise AssertionError("unreachable")


def _cores_only(args: argparse.Namespace) -> int:
    """--resource cpus: the cores rule replayed (harpd.cli.replay_cores), errors as one line."""
    from harpd.cli import replay_cores
    from harpd.config import ConfigError, load_settings
    from harpd.replay.dataset import ReplayError
    from harpd.traces import TraceFormatError

    try:
        settings = load_settings(getattr(args, "config", None))
        rep = replay_cores.report(args.trace, settings.predict.alpha_cpus, settings)
    except (ConfigError, ReplayError, TraceFormatError) as exc:
        _fail(str(exc))
    except OSError as exc:
        _fail(f"{args.trace}: {exc.strerror or exc}")
    if args.format == "json":
        json.dump(rep, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(replay_cores.render(rep))
    return 0


def _workflow_only(args: argparse.Namespace) -> int:
    """--protocol sizey: the paper's evaluation alone (the harp metric replays chronologically)."""
    from harpd.cli import replay_workflow

    rep = _workflow(args)
    if args.format == "json":
        json.dump({"trace": str(args.trace), "resource": "mem", "workflow": rep}, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(f"{args.trace}: {rep['tasks']} tasks, {rep['seconds']:.1f}s" + "\n")
        sys.stdout.write(replay_workflow.render(rep))
    return 0


# -- --schedule: the schedule simulation (harpd.evaluate.schedule_simulation) ---------------


def _machine_size(args: argparse.Namespace) -> int | None:
    """Processors of the simulated machine (None without --schedule); a one-line error when unknown."""
    if args.procs is not None and not args.schedule:
        _fail("--procs sizes the simulated machine of --schedule; add --schedule or drop --procs")
    if args.replicas < 1:
        _fail(f"--replicas {args.replicas}: at least 1 copy of the trace is simulated (1: the trace as recorded)")
    if not (0 < args.compress <= 1):
        _fail(f"--compress {args.compress:g}: a factor above 0 and at most 1 (1: the trace's own arrivals)")
    if not (args.shake >= 0) or args.shake == float("inf"):
        _fail(f"--shake {args.shake:g}: give the seconds a submission may move, 0 or more")
    if args.open_loop and not args.schedule:
        _fail("--open-loop chooses how the simulated queue of --schedule decides harp-soft; add --schedule or drop it")
    if args.queue_rule is not None and (args.open_loop or not args.schedule):
        flag = "--queue-rule" if args.queue_rule else "--no-queue-rule"
        _fail(
            f"{flag} chooses how harp-soft is decided inside the simulated queue: use it with --schedule, "
            "without --open-loop"
        )
    if not args.schedule:
        return None
    if args.resource != "time":
        _fail("--schedule simulates run times; use it with --resource time")
    if args.procs is not None:
        if args.procs < 1:
            _fail(f"--procs {args.procs}: the machine needs at least one processor")
        return args.procs
    from harpd.traces.swf import TraceFormatError, machine_size

    try:
        size = machine_size(args.trace)
    except (OSError, TraceFormatError, UnicodeError) as exc:
        _fail(f"{args.trace}: {getattr(exc, 'strerror', None) or exc}")
    if size is None:
        _fail(
            f"{args.trace} gives no machine size (no SWF MaxProcs/MaxNodes header; sacct exports have none): "
            "pass --procs N, the processors of the cluster"
        )
    return size


def _schedule(args, prep, cfg, res, procs: int, say) -> QueueFigures:
    """Replay the missing limit mode if needed, simulate every policy, save the figures for `harp report`."""
    from harpd.evaluate.schedule_simulation import MODEL, QueueError, ScheduleOptions, schedule
    from harpd.progress import Bar
    from harpd.replay.engine import run as replay_run

    notes: list[str] = []
    got = {res.limits: res}
    soft_ok = "limits" in {f.name for f in dataclasses.fields(cfg)}
    if MODEL not in res.alloc:
        notes.append(f"no {MODEL} rows: add {MODEL} to --models")
    else:
        for mode in ("hard", "soft") if soft_ok else ("hard",):
            if mode not in got:
                say(f"queue: replaying {MODEL} with {mode} limits")
                other = dataclasses.replace(cfg, limits=mode, models=("request", MODEL), bounds=False)
                try:
                    got[mode] = replay_run(prep, other, progress=say)
                except ValueError as exc:  # ReplayError: this trace cannot be replayed so
                    notes.append(f"harp-{mode} absent: {exc}")
        if not soft_ok:
            notes.append("harp-soft absent: this harp's replay has no soft limits")
    alloc = {mode: r.alloc.get(MODEL) for mode, r in got.items()}
    # one bar per simulated policy (a 77k-job trace takes minutes each), the policies' names aligned
    bar = None if args.quiet else (lambda name: Bar(f"{name:<13}"))
    say(f"queue: simulating {prep.n} jobs on {procs} processors")
    try:
        # the shape schedule() writes (harpd.evaluate.schedule_simulation), as the report reads it back
        queue = cast(
            "QueueFigures",
            schedule(
                prep,
                procs,
                alloc.get("hard"),
                alloc.get("soft"),
                ScheduleOptions(
                    max_attempts=cfg.max_attempts,
                    max_extensions=cfg.soft.max_extensions,
                    lead_s=cfg.soft.lead_s,
                    look_s=cfg.soft.look_s,
                    replicas=args.replicas,
                    shake_s=args.shake,
                    compress=args.compress,
                    closed_loop=not args.open_loop,
                    queue_rule=args.closed_loop_rule,
                ),
                progress=bar,
                notes=notes,
            ),
        )
    except QueueError as exc:
        _fail(str(exc))
    queue["trace"] = str(args.trace)
    _save_queue(args, queue, say)
    return queue


def _save_queue(args, queue: QueueFigures, say) -> None:
    """Leave the figures beside the store for `harp report --format html` (skipped when not writable)."""
    from harpd.config import ConfigError, load_settings
    from harpd.report.queue_figures import path_beside, save

    try:
        target = path_beside(load_settings(getattr(args, "config", None)).store.path)
        save(target, queue)
    except (ConfigError, OSError, ValueError) as exc:
        say(f"queue figures not saved for harp report ({exc})")
        return
    say(f"queue figures saved to {target} for harp report --format html")


def _figure_and_error(v, se, fmt: str) -> str:
    """A figure and its standard error (``se``, None: a single run, no error to show)."""
    return _figure(v, fmt) if se is None else f"{_figure(v, fmt)} ±{_figure(se, fmt)}"


def render_queue(q: QueueFigures) -> str:
    """The --schedule table: one row per policy (means over the copies, ± their standard error)."""
    head = ["policy", "mean wait", "p95 wait", "mean bsld", "util", "kills", "ext", "delayed by ext", "delayed by kill"]
    lines = [head]
    for p in q["policies"]:
        lines.append(
            [
                p["policy"],
                _figure_and_error(p["mean_wait_s"], p.get("mean_wait_s_se"), ",.0f"),
                _figure(p["p95_wait_s"], ",.0f"),
                _figure_and_error(p["mean_bounded_slowdown"], p.get("mean_bounded_slowdown_se"), ".2f"),
                _figure(p["utilization"], ".3f"),
                str(p["kills"]),
                str(p["extensions"]),
                str(p["delayed_by_extension"]),
                str(p["delayed_by_kill"]),
            ]
        )
    widths = [max(len(r[i]) for r in lines) for i in range(len(head))]
    copies = q.get("replicas", 1)
    out = [
        "",
        f"queue: FCFS + EASY backfilling on {q['procs']} processors, {q['jobs']} jobs (seconds; "
        "bsld: bounded slowdown, 10 s bound"
        + (f"; means over {copies} copies, ± standard error)" if copies > 1 else ")"),
    ]
    for k, r in enumerate(lines):
        out.append("  ".join(c.ljust(widths[i]) if i == 0 else c.rjust(widths[i]) for i, c in enumerate(r)))
        if k == 0:
            out.append("  ".join("-" * w for w in widths))
    for name, cmp in (q.get("vs_users") or {}).items():
        parts = []
        for f, short in (("mean_wait_s", "wait"), ("mean_bounded_slowdown", "bsld")):
            c = cmp.get(f) or {}
            if c.get("rel_diff") is None:
                continue
            se = "" if c.get("se") is None else f" ±{c['se']:.1%}"
            parts.append(f"{short} {c['rel_diff']:+.1%}{se} ({c['verdict']})")
        if parts:
            out.append(f"{name} vs the users' requests, copy by copy: " + ", ".join(parts))
    for name, g in q["gap_closed"].items():
        parts = [gap_words(g.get(f), (q.get("gap") or {}).get(f), what) for f, what in _GAP_WORDS]
        out.append(f"{name}: " + "; ".join(parts))
    out += [f"note: {n}" for n in q["notes"]]
    return "\n".join(out) + "\n"


_GAP_WORDS = (("mean_wait_s", "mean wait"), ("mean_bounded_slowdown", "mean bounded slowdown"))


def gap_words(share: float | None, gap: GapSize | None, what: str) -> str:
    """How much of the users→exact gap a harp row closes, in words that hold outside 0-100%.

    A share is shown only where the gap is larger than two standard errors of
    itself (over the copies): a ratio over a gap within its noise can read
    546% or −123% and means nothing.
    """
    g, se = (None, None) if gap is None else (gap.get("gap"), gap.get("se"))
    if share is None or g is None:
        return f"{what}: exact runtimes do not beat the users' requests, no gap to close"
    if se is not None and abs(g) <= 2 * se:
        return f"{what}: the users→exact gap ({g:,.1f} ±{se:,.1f}) is within its noise, no share of it shown"
    one = " (one copy: no error)" if se is None else ""
    if share > 1:
        return f"{what}: better than exact runtimes ({share:.0%} of the users→exact gap){one}"
    if share < 0:
        return f"{what}: worse than the users' requests ({share:.0%} of the users→exact gap){one}"
    return f"{what}: closes {share:.0%} of the users→exact gap{one}"


def skipped_words(skipped: dict[str, int]) -> str:
    """The jobs a replay left out, in words: '10,744 jobs with no usage, 3 not finished'."""
    return ", ".join(
        f"{n:,} {'jobs ' if k == 0 else ''}{_SKIP_WHY.get(why, why)}" for k, (why, n) in enumerate(skipped.items())
    )


_SKIP_WHY = {
    "no usage": "with no usage",
    "not finished": "not finished",
    "no submit time": "with no submit time",
    "no request": "with no request",
}


def check_soft_targets(h: ModelMetrics, budget: float) -> dict[str, TargetCheck]:
    """The soft-limit targets (docs/metrics.md, "Soft limits"), on harp's row."""
    ov, co = finite_or_none(h.over_vs_request), finite_or_none(h.consumed_vs_request)
    ext = finite_or_none(h.extended_share)
    kills = finite_or_none(h.harp_kills)
    return {
        "harp_kills": {"value": kills, "target": "== 0", "pass": kills == 0},
        "consumed_vs_users": {"value": co, "target": "<= 1.00", "pass": co is not None and co <= 1.0 + 1e-9},
        "final_over_reservation_vs_users": {
            "value": ov,
            "target": "<= 0.8 on every trace (0.5 on the median)",
            "pass": ov is not None and ov <= 0.8,
        },
        "extended_share": {
            "value": ext,
            "target": f"<= {budget:g} of the jobs",
            "pass": ext is not None and ext <= budget,
        },
    }


def check_targets(
    h: ModelMetrics | None, alpha: float, relative: bool, limits: str = "hard", budget: float = 0.10
) -> dict[str, TargetCheck]:
    """harp's accuracy targets, checked on its row ``h`` (the users' row is the reference)."""
    if h is None:
        return {}
    if limits == "soft":
        return check_soft_targets(h, budget)
    under = finite_or_none(h.under_rate)
    out: dict[str, TargetCheck] = {"under_rate": {"value": under, "target": f"<= {alpha:g}", "pass": under <= alpha}}
    if relative:
        ov = finite_or_none(h.over_vs_request)
        co = finite_or_none(h.consumed_vs_request)
        out["over_reservation_vs_users"] = {
            "value": ov,
            "target": "<= 1 (never more than the users')",
            "pass": ov is not None and ov <= 1.0,
        }
        out["over_reservation_halved"] = {
            "value": ov,
            "target": "<= 0.5 on the median trace",
            "pass": ov is not None and ov <= 0.5,
        }
        out["consumed_vs_users"] = {"value": co, "target": "<= 1.05", "pass": co is not None and co <= 1.05}
    return out


def build_report(res, trace: str, alpha: float, seconds: float) -> ReplayReport:
    from harpd.cli.replay_verdict import verdict

    prep = res.prepared
    rows = {m.model: m for m in res.metrics}
    unit = ("core-hours", 3600.0) if prep.resource == "time" else ("GiB", 1024.0)
    limits = res.limits
    policy = res.soft
    budget = policy.extension_budget if policy is not None else 0.10
    report = ReplayReport(
        trace=str(trace),
        source=prep.source,
        resource=prep.resource,
        relative=prep.has_requests,
        jobs=prep.n,
        skipped={k: v for k, v in prep.skipped.items() if v},
        retrains=res.retrains,
        seconds=round(seconds, 2),
        alpha=alpha,
        weight="cores" if prep.resource == "time" else "none",
        unit=unit[0],
        unit_scale=unit[1],
        models=tuple(rows.values()),
        targets=check_targets(rows.get("harp"), alpha, prep.has_requests, limits, budget),
        notes=res.notes,
        limits=limits,
        soft_policy=policy.explain() if (policy is not None and limits == "soft") else None,
    )
    return dataclasses.replace(report, verdict=verdict(report))


def _figure(v, fmt: str) -> str:
    """A figure of the report in ``fmt``; ``-`` where there is none (None, NaN, infinite)."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    return format(v, fmt)


def _soft_lines(rep: ReplayReport) -> list[list[str]]:
    """The table under soft limits: extensions instead of kills, the final limit's over-reservation."""
    scale = rep.unit_scale
    lines = [
        [
            "model",
            "jobs",
            "changed",
            "extended",
            "ext/job",
            "harp kills",
            f"over-res {rep.unit}",
            "over-res vs users",
            "of it in jobs kept",
            "planned wrongly",
            "planned wrongly vs users",
            "consumed vs users",
            "score",
        ]
    ]
    for m in rep.models:
        name = "users' requests" if m.model == "request" else m.model
        lines.append(
            [
                name,
                str(m.jobs),
                _figure(m.changed, ".1%"),
                _figure(m.extended_share, ".1%"),
                _figure(m.extensions_per_job, ".2f"),
                str(m.harp_kills),
                _figure(m.over_reservation / scale, ",.0f"),
                _figure(m.over_vs_request, ".3f"),
                _figure(m.kept_over_vs_request, ".3f"),
                _figure(m.planned_wrongly, ".3f"),
                _figure(m.planned_wrongly_vs_request, ".3f"),
                _figure(m.consumed_vs_request, ".3f"),
                _figure(m.score, ".3f"),
            ]
        )
    return lines


def render_table(rep: ReplayReport) -> str:
    scale = rep.unit_scale
    soft = rep.limits == "soft"
    head = [
        "model",
        "jobs",
        "changed",
        "under",
        "lost",
        "resv/used",
        f"over-res {rep.unit}",
        "over-res vs users",
        "consumed/used",
        "consumed vs users",
        "score",
    ]
    lines = [head]
    for m in [] if soft else rep.models:
        name = "users' requests" if m.model == "request" else m.model
        lines.append(
            [
                name,
                str(m.jobs),
                _figure(m.changed, ".1%"),
                _figure(m.under_rate, ".2%"),
                str(m.lost),
                _figure(m.reserved_over_used, ".3f"),
                _figure(m.over_reservation / scale, ",.0f"),
                _figure(m.over_vs_request, ".3f"),
                _figure(m.consumed_over_used, ".3f"),
                _figure(m.consumed_vs_request, ".3f"),
                _figure(m.score, ".3f"),
            ]
        )
    if soft:
        lines = _soft_lines(rep)
        head = lines[0]
    widths = [max(len(r[i]) for r in lines) for i in range(len(head))]
    out = [
        f"{rep.source}: {rep.jobs} jobs, resource {rep.resource}, {rep.retrains} retrains, "
        f"{rep.seconds:.0f}s, {rep.limits} limits"
        + (f" (skipped: {skipped_words(rep.skipped)})" if rep.skipped else "")
    ]
    out += list(rep.verdict.text) if rep.verdict is not None else []
    out.append("")
    if soft and rep.soft_policy:
        out.append("soft policy: " + ", ".join(f"{k} {v}" for k, v in rep.soft_policy.items() if k != "limits"))
    for k, r in enumerate(lines):
        out.append("  ".join(c.ljust(widths[i]) if i == 0 else c.rjust(widths[i]) for i, c in enumerate(r)))
        if k == 0:
            out.append("  ".join("-" * w for w in widths))
    out.append("")
    out.append(
        "vs users: the model's figure over the users' requests' on the same jobs (below 1: less than the users')"
    )
    if soft:
        out.append(
            "extended: share of jobs extended at least once; over-res: of the final limit "
            "after extensions; of it in jobs kept: the part in jobs harp kept at their request; "
            "planned wrongly: Σ cores × |limit at start − used| / Σ cores × used; "
            "score: lower is better (docs/metrics.md, 'Soft limits')"
        )
    else:
        out.append(
            "under: share of jobs that fit their request but run out under harp's first allocation; "
            "score: lower is better (docs/metrics.md)"
        )
        if rep.resource == "time" and rep.relative and not any(m.changed for m in rep.models):
            out.append(
                "note: every model kept every time request. Each row is decided by harpd's own kernel, and under "
                "hard limits it cuts a time limit only where the queue's gain outweighs a kill "
                "(predict.hard_cut_gain, 0 by default); --limits soft shows what the models would cut"
            )
    return "\n".join(out) + "\n"
