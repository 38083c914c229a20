"""Soft limits in the replay: decide again at the start, extend instead of kill.

When harpd may change other users' jobs (issue 16), harp's ``--time`` is no
longer Slurm's kill time: the user's own request is.  harp's limit becomes
the runtime the backfill planner sees, and harpd raises it before it runs out
by the escalation rule (``harpd.recovery.escalation``: double, capped by the
user's request and the partition).  Two things change in what harp can do:

* a job is decided at submission and again when it *starts*, with whatever
  had finished by then: the template's most recent runs (same user, request
  and cores) are the best single hint of the next one, and a job that waited
  in the queue has more of them;
* a miss costs an extension (a broken promise to the planner), not a killed
  run, so harp can cut much deeper: it aims at a quantile such that about
  the extension budget of jobs outgrow their start limit.

The start-time decision uses the trace's start time (submit + wait): it
ignores how harp's own limits would have changed the schedule.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from harpd.predict.allocation import Guard, allocate_many
from harpd.recovery.escalation import simulate_many
from harpd.records import Outcome

#: more extensions than this per job is not a chain but a loop (each doubles)
MAX_EXTENSIONS = 64


@dataclass(frozen=True, slots=True)
class SoftPolicy:
    """The soft-limit knobs of ``[predict]`` (``soft_*`` settings).

    ``quantile``: the share of jobs the start limit should cover (a miss is
    one extension); ``extension_budget``: the share of jobs (all that pass
    through harp) that may need an extension, which ``hold_budget`` holds;
    ``recent_runs`` / ``recent_margin``: the start-time rule, ``margin`` × the
    most the template's last ``recent_runs`` finished runs used (five: the
    History's ``r_max5`` feature, which the live predictor reads);
    ``min_recent``: runs the template needs before that rule speaks.
    """

    quantile: float = 0.9
    extension_budget: float = 0.10
    recent_runs: int = 5
    recent_margin: float = 1.1
    min_recent: int = 3
    # the budget controller: log-scale step per finished job, and its range
    gamma: float = 0.02
    scale_range: tuple[float, float] = (0.5, 4.0)

    @classmethod
    def from_settings(cls, predict) -> "SoftPolicy":
        return cls(
            quantile=getattr(predict, "soft_quantile", cls.quantile),
            extension_budget=getattr(predict, "soft_extension_budget", cls.extension_budget),
            recent_margin=getattr(predict, "soft_recent_margin", cls.recent_margin),
        )

    def explain(self) -> dict:
        return {"limits": "soft", "quantile": self.quantile, "extension_budget": self.extension_budget,
                "recent_runs": self.recent_runs, "recent_margin": self.recent_margin}


def soft_guard(guard: Guard) -> Guard:
    """The hard guard rails without their walk-back floor.

    ``min_fraction`` keeps a hard cut within reach of the request in the
    escalation's few attempts; an extension has no attempt limit, so under
    soft limits only the floor (one minute) bounds a cut from below.
    """
    return Guard(min_history=guard.min_history, floor=guard.floor, allow_shrink=guard.allow_shrink,
                 max_raise_factor=guard.max_raise_factor, leave_alone_ratio=guard.leave_alone_ratio,
                 margin=guard.margin, min_fraction=0.0)


def recent_at(prep, at: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per job: how many runs of its template had finished strictly before ``at[i]``
    (at most ``k`` counted) and the most that the last ``k`` of them used, as a
    share of the request (a run killed at its request counts as 1: all of it).

    Needs the template keys (``prepare(..., keep_templates=True)``).
    """
    if prep.template is None or prep.end is None:
        raise ValueError("soft limits need template keys and end times: prepare(..., keep_templates=True)")
    n = prep.n
    tmpl = prep.template
    ratio = np.where(prep.censored, 1.0, prep.need / np.where(np.isfinite(prep.request), prep.request, np.nan))
    fin = prep.finish_seq
    fin_end = prep.end[fin]
    count = np.zeros(n, np.int64)
    mx = np.full(n, np.nan)
    last: dict[object, deque[float]] = {}
    p = 0
    for i in np.argsort(at, kind="stable"):
        t = at[i]
        while p < n and fin_end[p] < t:
            j = fin[p]
            d = last.get(tmpl[j])
            if d is None:
                d = last[tmpl[j]] = deque(maxlen=k)
            d.append(float(ratio[j]))
            p += 1
        d = last.get(tmpl[i])
        if d:
            count[i] = len(d)
            mx[i] = max(d)
    return count, mx


def start_bound(up_log: np.ndarray, count: np.ndarray, recent_max: np.ndarray, policy: SoftPolicy) -> np.ndarray:
    """The bound (log need/request) a job gets at its start under soft limits.

    With enough recent runs of its template, the start-time rule
    (``recent_margin`` × their maximum) decides; the model's bound at the
    soft quantile fills in where the template is new or rare.
    """
    with np.errstate(divide="ignore", invalid="ignore"):
        rec = np.log(recent_max * policy.recent_margin)
    use = (count >= policy.min_recent) & np.isfinite(rec)
    return np.where(use, rec, up_log)


def start_limits(prep, up_log: np.ndarray, guard: Guard, policy: SoftPolicy) -> np.ndarray:
    """The limit each job starts with (NaN: the user's request stands), without the budget controller."""
    count, mx = recent_at(prep, prep.start, policy.recent_runs)
    bound = start_bound(np.asarray(up_log, float), count, mx, policy)
    return allocate_many(prep.request, bound, prep.n_hist, prep.limit, soft_guard(guard))


def hold_budget(prep, bound_log: np.ndarray, guard: Guard, policy: SoftPolicy,
                trace: list[float] | None = None) -> np.ndarray:
    """Start limits from ``bound_log`` under a controller that holds the extension budget.

    Walks starts, extensions and ends in time order.  At its start a job
    gets ``allocate(request, bound + s)``; ``s`` moves by
    ``gamma × (extended − budget)`` (adaptive conformal inference's update,
    on the extension rate): up at the moment a job outgrows its start limit
    (when harpd extends it: jobs submitted together learn from the first
    one's extension, not from its end), slowly down when a job ends without
    one.  So the long-run share of jobs (all that pass through harp, left
    alone or not) that needed an extension settles at the budget, within
    ``scale_range``.  ``trace`` (if given) collects ``exp(s)`` every
    thousand starts.
    """
    import heapq

    from harpd.predict.allocation import allocate

    n = prep.n
    req, need, cens = prep.request, prep.need, prep.censored
    g = soft_guard(guard)
    lo, hi = math.log(policy.scale_range[0]), math.log(policy.scale_range[1])
    out = np.full(n, np.nan)
    # static events: ends (kind 0) before starts (kind 2) at equal times; extensions (kind 1) come later
    t = np.concatenate([prep.end, prep.start])
    kind = np.concatenate([np.zeros(n, np.int8), np.full(n, 2, np.int8)])
    idx = np.concatenate([np.arange(n), np.arange(n)])
    order = np.lexsort((kind, t))
    crossings: list[tuple[float, int]] = []
    extended = np.zeros(n, bool)
    s = 0.0
    budget, gamma = policy.extension_budget, policy.gamma
    started = 0
    limit = prep.limit

    def step(err: float) -> None:
        nonlocal s
        s = min(max(s + gamma * (err - budget), lo), hi)

    for e in order:
        te = t[e]
        while crossings and crossings[0][0] <= te:  # jobs that outgrew their start limit by now
            step(1.0)
            heapq.heappop(crossings)
        i = int(idx[e])
        if kind[e] == 2:
            b = bound_log[i]
            if math.isfinite(b):
                lim = None if limit is None or not math.isfinite(limit[i]) else float(limit[i])
                v, _ = allocate(float(req[i]), float(b) + s, int(prep.n_hist[i]), lim, g)
                if v is not None:
                    out[i] = v
                    if (v <= need[i]) if cens[i] else (v < need[i]):
                        extended[i] = True
                        heapq.heappush(crossings, (float(prep.start[i]) + v, i))
            started += 1
            if trace is not None and started % 1000 == 0:
                trace.append(math.exp(s))
        elif not extended[i]:
            step(0.0)
    return out


def extend(start: np.ndarray, need: np.ndarray, request: np.ndarray, censored: np.ndarray,
           cap: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What harpd's extensions make of each start limit: ``(final, extensions, harp_killed)``.

    ``start`` is the limit at the start (NaN: the request); a job that
    outgrows its limit is raised by the escalation rule, capped by its own
    request (the kill time) and ``cap``, as often as it needs.  A job that
    needs more than its request (censored) is killed at the request: the
    user's limit, not harp's.  ``harp_killed`` marks jobs stopped below their
    request, which the rule never does (kept as a check, 0 by construction).
    """
    req = np.asarray(request, float)
    need = np.asarray(need, float)
    cens = np.asarray(censored, bool)
    first = np.where(np.isfinite(start), start, req)
    kill_at = req if cap is None else np.fmin(req, np.asarray(cap, float))
    _, fitted, last, attempts = simulate_many(need, first, req, kill_at, Outcome.TIMEOUT,
                                              MAX_EXTENSIONS, cens)
    ext = attempts - 1
    final = np.where(np.isfinite(last), last, req)
    harp_killed = ~fitted & ~cens & (final < np.where(np.isfinite(kill_at), kill_at, math.inf))
    return final, ext, harp_killed
