"""What harp does to the queue: a replay's allocations through the EASY simulator.

The adapter between ``harp replay`` (``harpd.replay.engine``: which limit
harp would have given each job) and the scheduler simulation
(``harpd.simulate``: what the queue would then have looked like).  It builds
one ``Workload`` from the replayed trace and one ``LimitPolicy`` per row of
the comparison:

* ``users``: the users' own requests; a job still running at its request is
  killed there for good (as the trace's scheduler did);
* ``harp-hard``: harp's first allocation of a hard-limit replay (NaN: the
  request stands); a job reaching it is killed and resubmitted at once with
  the escalation rule's next limit (``harpd.recovery.escalation``, the
  daemon's own rule), capped by the user's request; when harp's attempts run
  out below the request the user resubmits with the request (as the replay's
  metric assumes);
* ``harp-soft``: the limit of a soft-limit replay when the job starts; a job
  reaching it is extended by harpd's extender's own rule
  (``harpd.predict.extension``: by default straight back to the request, in
  whole minutes) and only killed at the request.  The replay gives no
  separate submission-time limit, so the queued job is planned with its
  start limit too (an approximation, stated in docs/metrics.md);
* ``exact``: limits equal to the runtimes, the bound no predictor beats.

harp-soft is decided in a closed loop by default: at each job's submission
the simulator asks a decision (``Decide``: job index, ``QueueView`` -> limit
seconds) with the simulated queue as harpd would see it then.  The default
decision is the replay's soft limit as it is (today's per-job decision, which
reads no queue: the figures equal the open loop's); with ``queue_rule`` it
goes through the queue rule (``harpd.predict.queue_policy``: behind waiting
work that outlasts a job's request only its deep cuts stand), which is off by
default (docs/metrics.md, 'Closed loop', for why and what it measured).
``closed_loop=False`` skips the asking (open loop).

Jobs come from ``Prepared``: submit time, ``need`` (the used time) as the
runtime, ``weight`` (cores) as the width.  The figures' definitions are
``harpd.simulate.schedule``'s.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from harpd.predict.extension import next_extension
from harpd.predict.queue_policy import weigh
from harpd.predict.queue_view import QueueView
from harpd.predict.soft import MAX_EXTENSIONS
from harpd.records import Outcome
from harpd.recovery.escalation import next_allocation
from harpd.replay.dataset import Prepared
from harpd.simulate import LimitHook, LimitPolicy, SubmitHook, Summary, Workload
from harpd.simulate.shake import mean_row, paired, simulate_shaken

#: the rows of a queue comparison, in display order
POLICIES = ("users", "harp-hard", "harp-soft", "exact")
#: the allocation (``ReplayResult.alloc``) the harp rows are built from
MODEL = "harp"
#: figures whose gap (users → exact) each harp row closes
GAP_FIGURES = ("mean_wait_s", "mean_bounded_slowdown")

Progress = Callable[[str], "Callable[[int, int], None] | None"]
#: a closed-loop decision: (job index, the queue at its submission) -> its limit in seconds
Decide = Callable[[int, QueueView], float]


class QueueError(ValueError):
    """A trace or option the queue simulation cannot use; one line for the user."""


@dataclass(frozen=True, slots=True)
class ScheduleOptions:
    """How ``harp replay --schedule`` simulates the queue: its options, checked once (QueueError, one line).

    ``max_attempts``: harp-hard's attempts before the user resubmits with the
    request; ``max_extensions``, ``lead_s``, ``look_s``: harp-soft's extender
    (harpd's ``[predict]`` and ``[watch]``); ``replicas`` copies of the trace,
    the others shaken by ±``shake_s`` from ``seed`` (``harpd.simulate.shake``);
    ``compress``: the inter-arrival times' factor (below 1: a more loaded
    machine); ``closed_loop``: harp-soft decided at each submission from the
    simulated queue (``queue_decision``, through the queue rule with
    ``queue_rule``), else the replay's soft limits as they are.
    """

    max_attempts: int = 3
    max_extensions: int = MAX_EXTENSIONS
    lead_s: float = 0.0
    look_s: float = 0.0
    replicas: int = 1
    shake_s: float = 60.0
    seed: int = 0
    compress: float = 1.0
    closed_loop: bool = True
    queue_rule: bool = False

    def __post_init__(self) -> None:
        if self.replicas < 1:
            raise QueueError(f"--replicas {self.replicas}: at least one copy of the trace is simulated")
        if self.shake_s < 0:
            raise QueueError(f"--shake {self.shake_s:g}: a shaking amplitude is 0 seconds or more")
        if not 0 < self.compress <= 1:
            raise QueueError(f"--compress {self.compress:g}: a factor above 0 and at most 1")


def workload_of(prep: Prepared) -> Workload:
    """The trace's jobs as the simulator sees them: submit, cores, used time."""
    if prep.resource != "time":
        raise QueueError("the queue simulation needs run times: replay with --resource time")
    return Workload(prep.submit, np.maximum(np.rint(prep.weight), 1).astype(np.int64), np.maximum(prep.need, 0.0))


def _requests(prep: Prepared) -> np.ndarray:
    req = prep.request
    if not prep.has_requests or not np.all(np.isfinite(req) & (req > 0)):
        raise QueueError(
            "the trace has jobs without a requested time; the queue simulation compares with the "
            "users' requests and needs one for every job"
        )
    return req


def _cap(prep: Prepared, req: np.ndarray) -> np.ndarray:
    """The most a job's limit may become: its request, and the partition limit where known."""
    if prep.limit is None:
        return req
    return np.fmin(req, prep.limit)


def escalation_hook(
    req: np.ndarray, cap: np.ndarray, max_attempts: int, mode: str, max_extensions: int = MAX_EXTENSIONS
) -> LimitHook:
    """``on_limit`` for a harp policy: the escalation rule's next limit (see the module doc).

    Soft: harpd's extender's own rule (``harpd.predict.extension``), so the
    queue sees the limits harpd would set, whole minutes included.  Hard:
    recovery's escalation, one attempt per kill.
    """

    def hook(j: int, limit: float, events: int) -> float | None:
        r, c = float(req[j]), float(cap[j])
        if mode == "soft":  # harpd's extender's rule, step for step (an extension is not an attempt)
            ext = next_extension(limit, r, c if math.isfinite(c) else None, events, max_extensions)
            return None if ext is None else float(ext.limit_s)
        step = next_allocation(Outcome.TIMEOUT, limit, r, c, events + 1, max_attempts)
        if step.value is not None and step.value > limit:
            return step.value
        if limit < min(r, c):
            return min(r, c)  # harp gave up below the request: the user resubmits with it
        return None

    return hook


def queue_decision(
    limits: np.ndarray, req: np.ndarray, partition: np.ndarray | None, queue_rule: bool = False
) -> Decide:
    """Today's per-job soft limit; with ``queue_rule``, weighed against the queue as the decision kernel
    weighs it (``queue_policy.weigh``: the same function, the same request and partition limit)."""

    def today(j: int, _view: QueueView) -> float:
        return float(limits[j])

    def with_rule(j: int, view: QueueView) -> float:
        part = None if partition is None else float(partition[j])
        return weigh(view, float(req[j]), part, float(limits[j])).limit_s

    return with_rule if queue_rule else today


def submit_hook(decide: Decide, procs: int) -> SubmitHook:
    """The simulator's ``on_submit`` for ``decide``: its numbers made into harpd's ``QueueView``."""

    def hook(j: int, pending: int, backlog: float, running: int, now: float) -> float:
        return decide(j, QueueView(pending, backlog, running, now, total_cores=procs))

    return hook


def _first_limits(alloc: np.ndarray, req: np.ndarray) -> np.ndarray:
    a = np.asarray(alloc, float)
    return np.maximum(np.where(np.isfinite(a), a, req), 1.0)


def policies(
    prep: Prepared,
    hard: np.ndarray | None,
    soft: np.ndarray | None,
    max_attempts: int = 3,
    max_extensions: int = MAX_EXTENSIONS,
    lead_s: float = 0.0,
    look_s: float = 0.0,
    procs: int = 0,
    decide: Decide | None = None,
) -> list[LimitPolicy]:
    """The comparison's rows: ``hard``/``soft`` are harp's allocations (None: row absent).

    ``lead_s``/``look_s``: harpd's watcher (``watch.margin_s``, ``watch.interval_s``),
    which extends a harp-soft job at its first look within the lead of its limit.
    ``decide``: harp-soft in a closed loop on a machine of ``procs`` processors
    (None: the soft allocations as they are, open loop).
    """
    req = _requests(prep)
    cap = _cap(prep, req)
    out = [LimitPolicy(req, "hard", None, "users")]
    if hard is not None:
        first = _first_limits(hard, req)
        # where harp cut nothing (its hard-limit gate, kill_cost) nothing is ever escalated: the users' own row
        hook = escalation_hook(req, cap, max_attempts, "hard") if np.any(first < req) else None
        out.append(LimitPolicy(first, "hard", hook, "harp-hard"))
    if soft is not None:
        out.append(
            LimitPolicy(
                _first_limits(soft, req),
                "soft",
                escalation_hook(req, cap, max_attempts, "soft", max_extensions),
                "harp-soft",
                lead_s=lead_s,
                look_s=look_s,
                on_submit=None if decide is None else submit_hook(decide, procs),
            )
        )
    out.append(LimitPolicy(np.maximum(prep.need, 1.0), "hard", None, "exact"))
    return out


def gap_closed(rows: dict[str, dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    """Per harp row and figure: (users − harp) / (users − exact); None where exact does not beat the users."""
    u, x = rows.get("users"), rows.get("exact")
    out: dict[str, dict[str, float | None]] = {}
    if u is None or x is None:
        return out
    for name in ("harp-hard", "harp-soft"):
        h = rows.get(name)
        if h is None:
            continue
        out[name] = {}
        for f in GAP_FIGURES:
            if u[f] is None or x[f] is None or h[f] is None:  # no job simulated
                out[name][f] = None
                continue
            gap = u[f] - x[f]
            out[name][f] = (u[f] - h[f]) / gap if gap > 0 else None
    return out


def own_kills(users: Sequence[Summary], harp: Sequence[Summary]) -> int:
    """The kills harp's limits add to the users' own, copy by copy (mean, rounded).

    A job harp left at its request is killed exactly where the users' request
    kills it (an over-long run, abandoned as in the trace), so those kills are
    the users', not harp's: a row that cut nothing adds none.
    """
    extra = [max(0, h.kills - u.kills) for u, h in zip(users, harp, strict=True)]
    return int(round(sum(extra) / len(extra))) if extra else 0


def gap_sizes(users: Sequence[Summary], exact: Sequence[Summary]) -> dict[str, dict[str, float | None]]:
    """Per figure the users→exact gap (users − exact), its mean over the copies and standard error.

    A share of a gap is a ratio; where the gap is within its own noise the
    share means nothing (it can read 546% or −123%), so the renderer shows
    one only where the gap is larger than ``CLEAR`` standard errors.
    """
    out: dict[str, dict[str, float | None]] = {}
    for f in GAP_FIGURES:
        d = np.array([getattr(u, f) - getattr(x, f) for u, x in zip(users, exact, strict=True)], float)
        d = d[np.isfinite(d)]
        if not len(d):
            out[f] = {"gap": None, "se": None}
            continue
        se = float(np.std(d, ddof=1) / math.sqrt(len(d))) if len(d) > 1 else None
        out[f] = {"gap": float(d.mean()), "se": se}
    return out


def _clean(v: Any) -> Any:
    return None if isinstance(v, float) and not math.isfinite(v) else v


def schedule(
    prep: Prepared,
    procs: int,
    hard: np.ndarray | None,
    soft: np.ndarray | None,
    options: ScheduleOptions | None = None,
    *,
    progress: Progress | None = None,
    notes: list[str] | None = None,
) -> dict[str, Any]:
    """Simulate every policy; the JSON-able queue section of a replay report.

    ``options``: how (``ScheduleOptions``; None: its defaults).  With
    ``replicas`` > 1 each figure is the mean over that many copies of the
    trace, copy 0 as recorded and the others shaken; ``paired`` then
    compares each row with the users' copy by copy.
    """
    opts = options or ScheduleOptions()
    if procs < 1:
        raise QueueError(f"--procs {procs}: the machine needs at least one processor")
    work = workload_of(prep)
    if opts.compress != 1:  # the same jobs arriving faster: a more loaded machine (harp's limits unchanged)
        first = float(work.submit.min()) if len(work) else 0.0
        work = Workload(first + (work.submit - first) * opts.compress, work.procs, work.runtime)
        notes = [*(notes or []), f"inter-arrival times multiplied by {opts.compress:g} (a more loaded machine)"]
    decide = None
    if soft is not None and opts.closed_loop:
        req = _requests(prep)
        decide = queue_decision(_first_limits(soft, req), req, prep.limit, opts.queue_rule)
    pols = policies(prep, hard, soft, opts.max_attempts, opts.max_extensions, opts.lead_s, opts.look_s, procs, decide)
    t0 = time.perf_counter()
    runs = simulate_shaken(
        work, pols, procs, replicas=opts.replicas, amplitude_s=opts.shake_s, seed=opts.seed, progress=progress
    )
    per_policy_s = round((time.perf_counter() - t0) / max(len(pols), 1), 2)
    rows = {
        name: {k: _clean(v) for k, v in mean_row(s).items()} | {"seconds": per_policy_s} for name, s in runs.items()
    }
    notes = list(notes or [])
    rejected = runs["users"][0].rejected
    if rejected:
        notes.append(f"{rejected} job(s) wider than {procs} processors were left out of every policy")
    for name in ("harp-hard", "harp-soft"):
        if name in rows:  # the kills harp's limits add to the users' own (those the trace's requests make)
            rows[name]["harp_kills"] = own_kills(runs["users"], runs[name])
    gap = gap_closed(rows)
    u, x = rows["users"], rows["exact"]
    for f in GAP_FIGURES:
        if u[f] is not None and x[f] is not None and x[f] >= u[f]:
            notes.append(f"exact runtimes do not beat the users' requests on {f}: no gap to close")
    if opts.replicas > 1:
        notes.append(
            f"each figure is the mean over {opts.replicas} copies of the trace (the first as recorded, the "
            f"others with every submission moved by up to ±{opts.shake_s:g} s: input shaking)"
        )
    compared = {name: paired(runs["users"], s) for name, s in runs.items() if name != "users"}
    return {
        "procs": int(procs),
        "jobs": int(len(work)),
        "replicas": int(opts.replicas),
        "shake_s": float(opts.shake_s),
        "compress": float(opts.compress),
        "soft_loop": None if soft is None else ("closed" if opts.closed_loop else "open"),
        "queue_rule": bool(soft is not None and opts.closed_loop and opts.queue_rule),
        "policies": list(rows.values()),
        "gap_closed": gap,
        "gap": gap_sizes(runs.get("users") or [], runs.get("exact") or []),
        "vs_users": compared,
        "notes": notes,
    }
