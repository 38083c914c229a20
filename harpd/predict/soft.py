"""Soft limits in the replay: decide again at the start, extend instead of kill.

When harpd may change other users' jobs, harp's ``--time`` is no
longer Slurm's kill time: the user's own request is.  harp's limit becomes
the runtime the backfill planner sees, and harpd raises it before it runs out,
by default once, straight back to the user's request (within the partition;
``SoftPolicy.max_extensions``; with more allowed, the earlier ones double by
the escalation rule, ``harpd.recovery.escalation``).  Two things change in what harp can do:

* a job is decided at submission and again when it *starts*, with whatever
  had finished by then: the template's most recent runs (same user, request
  and cores) are the best single hint of the next one, and a job that waited
  in the queue has more of them;
* a miss costs an extension (a broken promise to the planner), not a killed
  run, so harp can cut much deeper: it aims at a quantile such that about
  the extension budget of jobs outgrow their start limit;
* what is *running* is evidence too: a sibling of the same template that has
  already run for ``e`` seconds needs more than ``e``, so no job of the
  template starts with less (``running_bound``); and a burst of siblings
  started together shares one guess, so one wrong limit costs the whole
  burst an extension each: the more siblings in flight, the more cautious
  the start limit (``burst_tilt``);
* the extension budget counts jobs, but the reservation a cut saves is
  cores x time: the budget goes furthest where the most core-hours are at
  stake, so jobs with more at stake than usual are cut a little deeper and
  small ones a little less (``stake_tilt``; docs/metrics.md measures what it
  costs the queue).

The start-time decision uses the trace's start time (submit + wait): it
ignores how harp's own limits would have changed the schedule.
"""

from __future__ import annotations

import math
import sys
from collections import deque
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from harpd.predict.allocation import Guard, allocate_many
from harpd.records import Outcome
from harpd.recovery.escalation import simulate_many
from harpd.watcher_timing import watcher_look, watcher_looks

_FLOAT_MAX = sys.float_info.max

if TYPE_CHECKING:
    from harpd.config import PredictSettings, WatchSettings

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
    # log-bound added per log(1 + siblings of the template running at the start)
    burst_tilt: float = 0.2
    # log-bound taken off per unit of log(cores x request) above the usual (and added below it)
    # off by default: on a loaded machine the deeper cuts of wide, long jobs
    # extend them into the head's reservation (docs/metrics.md, 'Queue')
    stake_tilt: float = 0.0
    # the budget controller: log-scale step per finished job, and its range
    gamma: float = 0.02
    scale_range: tuple[float, float] = (0.5, 4.0)
    # the controller holds this share of the budget: it sits on its target,
    # so aiming at the budget itself would end a trace on the line or over it
    aim: float = 0.95
    # the usual stake: a running mean over about this many recent starts
    stake_window: int = 5000
    # extensions of one job: each but the last doubles its limit, and the last
    # goes straight to the user's own request (the kill time).  One, the
    # default: a job that outgrew harp's limit is one harp did not predict, and
    # a doubling that falls short again breaks the backfill planner's promise a
    # second time (measured: docs/metrics.md, 'Queue' and its appendix, step 6)
    max_extensions: int = 1
    # one user's share of extended jobs past which harp stops cutting them (SoftState.user_over_budget)
    user_extension_budget: float = 0.30
    # harpd's watcher (``[watch]``): it extends a job once less than ``lead_s`` is
    # left of its limit (``margin_s``), looking every ``look_s`` (``interval_s``)
    lead_s: float = 120.0
    look_s: float = 30.0

    @property
    def min_limit_s(self) -> float:
        """The smallest start limit the watcher can honour: its lead and one interval, in whole minutes.

        A limit shorter than the lead is extended at the watcher's first
        look, whatever the job does (seen on a real cluster: every job given
        1 minute with a 120 s lead was extended at 45-58 s): a plan the
        scheduler gets wrong every time.  With ``lead + interval`` the job
        runs at least one interval before the watcher may act.
        """
        return 60.0 * math.ceil((max(self.lead_s, 0.0) + max(self.look_s, 0.0)) / 60.0)

    @classmethod
    def from_settings(cls, predict: PredictSettings, watch: WatchSettings | None = None) -> SoftPolicy:
        """From ``[predict]``'s ``soft_*`` settings, and ``[watch]``'s lead and interval when given."""
        d = cls()  # a slotted dataclass: the defaults live on an instance, not the class
        return cls(
            lead_s=float(getattr(watch, "margin_s", d.lead_s)),
            look_s=float(getattr(watch, "interval_s", d.look_s)),
            quantile=getattr(predict, "soft_quantile", d.quantile),
            extension_budget=getattr(predict, "soft_extension_budget", d.extension_budget),
            recent_margin=getattr(predict, "soft_recent_margin", d.recent_margin),
            burst_tilt=getattr(predict, "soft_burst_tilt", d.burst_tilt),
            stake_tilt=getattr(predict, "soft_stake_tilt", d.stake_tilt),
            max_extensions=getattr(predict, "soft_max_extensions", d.max_extensions),
            user_extension_budget=getattr(predict, "soft_user_extension_budget", d.user_extension_budget),
        )

    def explain(self) -> dict:
        return {
            "limits": "soft",
            "quantile": self.quantile,
            "extension_budget": self.extension_budget,
            "recent_runs": self.recent_runs,
            "recent_margin": self.recent_margin,
            "burst_tilt": self.burst_tilt,
            "stake_tilt": self.stake_tilt,
            "max_extensions": self.max_extensions,
            "min_limit_s": self.min_limit_s,
            "watcher_lead_s": self.lead_s,
        }


class BudgetController:
    """The scale ``s`` (log) added to every soft bound, holding the share of extended jobs.

    Adaptive conformal inference's update on the extension rate: up by
    ``gamma × (1 − target)`` when a job outgrows its start limit (when harpd
    extends it, so jobs started together learn from the first extension, not
    from its end), down by ``gamma × target`` when a job ends without one.
    The long-run share of extended jobs then settles at ``target`` (``aim`` ×
    the budget), within ``scale_range``.  The replay and the live daemon run
    this same object; the daemon keeps ``s`` in its store across restarts.
    """

    def __init__(self, policy: SoftPolicy, s: float = 0.0) -> None:
        self.gamma = float(policy.gamma)
        self.target = float(policy.extension_budget) * float(policy.aim)
        self.lo, self.hi = math.log(policy.scale_range[0]), math.log(policy.scale_range[1])
        self.s = min(max(float(s), self.lo), self.hi)

    def _step(self, err: float) -> None:
        self.s = min(max(self.s + self.gamma * (err - self.target), self.lo), self.hi)

    def extended(self) -> None:
        """A job outgrew its start limit (its first extension)."""
        self._step(1.0)

    def ended(self) -> None:
        """A job ended within its start limit."""
        self._step(0.0)


class StakeMean:
    """A running mean of log(cores × request) over about ``window`` recent starts: the usual stake."""

    def __init__(self, window: int, mean: float = math.nan, n: int = 0) -> None:
        self.window = max(int(window), 1)
        self.mean = float(mean)
        self.n = int(n)

    def add(self, z: float) -> float:
        """Count one start's stake; returns the mean including it."""
        if not math.isfinite(z):
            return self.mean
        self.n += 1
        self.mean = z if self.n == 1 else self.mean + (z - self.mean) / min(self.n, self.window)
        return self.mean


def stake_of(cores, request):
    """log(cores × request): what a job's reservation puts at stake.

    Arrays (the replay's walk) or one job's numbers (harpd's request path,
    in plain Python: see ``running_bound``); the same values either way.
    """
    if isinstance(cores, np.ndarray) or isinstance(request, np.ndarray):
        return np.log(np.maximum(np.asarray(cores, float) * np.asarray(request, float), 1.0))
    return math.log(max(float(cores) * float(request), 1.0))


def tilt(policy: SoftPolicy, in_flight: float, stake: float, usual_stake: float) -> float:
    """One job's change of the log-bound: a burst adds caution, a large stake cuts deeper.

    An unknown stake difference (NaN) tilts nothing; an infinite one is
    clipped to the largest float, as ``numpy.nan_to_num`` does.
    """
    dz = float(stake) - float(usual_stake)
    dz = 0.0 if math.isnan(dz) else min(max(dz, -_FLOAT_MAX), _FLOAT_MAX)
    return policy.burst_tilt * math.log1p(max(float(in_flight), 0.0)) - policy.stake_tilt * dz


def running_bound(up_log, elapsed, request, policy: SoftPolicy):
    """No start limit below ``recent_margin`` × what a running sibling already used (log need/request).

    ``elapsed``: the longest run so far among the template's siblings still
    running (0 or NaN: none).  That sibling needs more than it has had, so
    the template's runs are at least that long: a lower bound nobody has to
    wait for, which matters most for arrays and bursts whose first runs
    have not finished yet.

    Arrays (the replay) or one job's floats (harpd, per sbatch): for one job
    a handful of numpy calls costs more than the whole decision once the
    CPU has gone cold between requests, so that case is plain Python, with
    the same values (tests/unit/predict/test_soft_policy.py).
    """
    if not any(isinstance(v, np.ndarray) for v in (up_log, elapsed, request)):
        one = float(up_log)
        try:
            least = math.log(float(elapsed) * policy.recent_margin / float(request))
        except (ValueError, ZeroDivisionError):  # none running (0), or no request: no lower bound
            return one
        return least if math.isfinite(least) and (math.isnan(one) or least > one) else one
    up = np.asarray(up_log, float)
    with np.errstate(divide="ignore", invalid="ignore"):
        low = np.log(np.asarray(elapsed, float) * policy.recent_margin / np.asarray(request, float))
    return np.where(np.isfinite(low), np.fmax(up, low), up)


def soft_guard(guard: Guard, policy: SoftPolicy | None = None) -> Guard:
    """The hard guard rails without their walk-back floor and their cold start.

    ``min_fraction`` keeps a hard cut within reach of the request in the
    escalation's few attempts; an extension has no attempt limit, so under
    soft limits only the floor (one minute) bounds a cut from below.
    ``min_history`` keeps a model from cutting a program it has never seen
    into a kill; under soft limits such a miss is one extension, which the
    budget controller counts like any other, so the model speaks for new
    programs too.  With ``policy``, the floor is at least the smallest limit
    harpd's watcher can honour (``SoftPolicy.min_limit_s``), and the watcher's
    lead is added to the bound (``Guard.headroom``): harpd extends a job once
    less than the lead is left of its limit, so a limit of just the bound
    would have a job that needs 100 s of a 180 s limit extended at 60 s, and
    the budget controller would widen every job's cut to pay for extensions
    that only the lead made.
    """
    floor = guard.floor if policy is None else max(guard.floor, policy.min_limit_s)
    headroom = guard.headroom if policy is None else max(guard.headroom, policy.lead_s, 0.0)
    return replace(guard, min_history=0, floor=floor, min_fraction=0.0, headroom=headroom)


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


def running_at(prep) -> tuple[np.ndarray, np.ndarray]:
    """Per job, at its start: how many jobs of its template were running, and the longest run so far among them.

    What harpd's watcher sees of the queue when it re-sizes a pending job
    (one listing per interval): siblings that started and have not ended.
    Needs the template keys (``prepare(..., keep_templates=True)``).
    """
    import heapq

    if prep.template is None or prep.end is None:
        raise ValueError("soft limits need template keys and end times: prepare(..., keep_templates=True)")
    n = prep.n
    tmpl = prep.template
    t = np.concatenate([prep.end, prep.start])
    kind = np.concatenate([np.zeros(n, np.int8), np.ones(n, np.int8)])  # ends before starts at one instant
    idx = np.concatenate([np.arange(n), np.arange(n)])
    order = np.lexsort((idx, kind, t))
    started: dict[object, list[tuple[float, int]]] = {}  # template -> heap of (start, job) that started
    ended = np.zeros(n, bool)
    count = np.zeros(n, np.int64)
    elapsed = np.zeros(n)
    for e in order:
        i = int(idx[e])
        if kind[e] == 0:
            ended[i] = True
            continue
        heap = started.setdefault(tmpl[i], [])
        while heap and ended[heap[0][1]]:
            heapq.heappop(heap)
        if heap:
            elapsed[i] = float(prep.start[i]) - heap[0][0]
            count[i] = sum(1 for _, j in heap if not ended[j])
        heapq.heappush(heap, (float(prep.start[i]), i))
        if len(heap) > 64 and count[i] < len(heap) // 2:  # drop the ended ones now and then
            started[tmpl[i]] = heap = [x for x in heap if not ended[x[1]]]
            heapq.heapify(heap)
    return count, elapsed


def start_limits(prep, up_log: np.ndarray, guard: Guard, policy: SoftPolicy) -> np.ndarray:
    """The limit each job starts with (NaN: the user's request stands), without the budget controller."""
    count, mx = recent_at(prep, prep.start, policy.recent_runs)
    bound = start_bound(np.asarray(up_log, float), count, mx, policy)
    return allocate_many(prep.request, bound, np.maximum(prep.n_hist, count), prep.limit, soft_guard(guard, policy))


def hold_budget(
    prep,
    bound_log: np.ndarray,
    guard: Guard,
    policy: SoftPolicy,
    trace: list[float] | None = None,
    in_flight: np.ndarray | None = None,
    n_hist: np.ndarray | None = None,
) -> np.ndarray:
    """Start limits from ``bound_log`` under a controller that holds the extension budget.

    Walks starts, extensions and ends in time order.  At its start a job
    gets ``allocate(request, bound + s + tilt)``; ``s`` is the
    ``BudgetController``'s scale (up at the moment a job outgrows its start
    limit, slowly down when a job ends without one), so the long-run share
    of jobs (all that pass through harp, left alone or not) that needed an
    extension settles at the controller's target (an extension as harpd's
    watcher makes it: at its first look within ``policy.lead_s`` of the
    limit, so a job still running then counts though it would have ended
    within its limit); ``tilt`` is ``tilt()``'s,
    from the siblings in flight (``in_flight``, 0 if not given) and the
    job's stake against the running usual stake.  ``n_hist``: the history
    each job has at its start (default: at submission).  ``trace`` (if
    given) collects ``exp(s)`` every thousand starts.
    """
    import heapq

    from harpd.predict.allocation import allocate

    n = prep.n
    req, need, cens = prep.request, prep.need, prep.censored
    g = soft_guard(guard, policy)
    nh = prep.n_hist if n_hist is None else n_hist
    flight = np.zeros(n) if in_flight is None else np.asarray(in_flight, float)
    stake = stake_of(prep.weight, np.where(np.isfinite(req), req, 1.0))
    ctl = BudgetController(policy)
    usual = StakeMean(policy.stake_window)
    out = np.full(n, np.nan)
    # static events: ends (kind 0) before starts (kind 2) at equal times; extensions (kind 1) come later
    t = np.concatenate([prep.end, prep.start])
    kind = np.concatenate([np.zeros(n, np.int8), np.full(n, 2, np.int8)])
    idx = np.concatenate([np.arange(n), np.arange(n)])
    order = np.lexsort((kind, t))
    crossings: list[tuple[float, int]] = []
    extended = np.zeros(n, bool)
    started = 0
    limit = prep.limit

    for e in order:
        te = t[e]
        while crossings and crossings[0][0] <= te:  # jobs that outgrew their start limit by now
            ctl.extended()
            heapq.heappop(crossings)
        i = int(idx[e])
        if kind[e] == 2:
            b = bound_log[i]
            mean = usual.add(float(stake[i]))
            if math.isfinite(b):
                lim = None if limit is None or not math.isfinite(limit[i]) else float(limit[i])
                adj = float(tilt(policy, flight[i], stake[i], mean))
                v, _ = allocate(float(req[i]), float(b) + ctl.s + adj, int(nh[i]), lim, g)
                if v is not None:
                    out[i] = v
                    # the watcher extends it at its first look within its lead of the limit
                    t0 = float(prep.start[i])
                    at = watcher_look(t0, policy.lead_s, policy.look_s, t0 + v)
                    if (v <= need[i]) if cens[i] else (t0 + need[i] > at):
                        extended[i] = True
                        heapq.heappush(crossings, (at, i))
            started += 1
            if trace is not None and started % 1000 == 0:
                trace.append(math.exp(ctl.s))
        elif not extended[i]:
            ctl.ended()
    return out


def soft_starts(
    prep, up_log: np.ndarray, guard: Guard, policy: SoftPolicy, trace: list[float] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """harp's start limits under soft limits, as the daemon decides them; and which jobs the start-time rule sized.

    The template's recent runs (else the model's bound ``up_log``), never
    below what a running sibling already used, under the budget controller
    with the burst and stake tilts; each job with the history it has at its
    start.
    """
    count, mx = recent_at(prep, prep.start, policy.recent_runs)
    flight, elapsed = running_at(prep)
    bound = running_bound(start_bound(np.asarray(up_log, float), count, mx, policy), elapsed, prep.request, policy)
    out = hold_budget(prep, bound, guard, policy, trace, in_flight=flight, n_hist=np.maximum(prep.n_hist, count))
    return out, (count >= policy.min_recent) & np.isfinite(mx)


def extend(
    start: np.ndarray,
    need: np.ndarray,
    request: np.ndarray,
    censored: np.ndarray,
    cap: np.ndarray | None = None,
    max_extensions: int = MAX_EXTENSIONS,
    lead_s: float = 0.0,
    look_s: float = 0.0,
    started_at: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What harpd's extensions make of each start limit: ``(final, extensions, harp_killed)``.

    ``start`` is the limit at the start (NaN: the request); a job that
    outgrows its limit is raised by the escalation rule (double), capped by
    its own request (the kill time) and ``cap``, except that its ``max_extensions``-th
    extension goes straight to that kill time (``SoftPolicy.max_extensions``,
    harpd's extender does the same).  A job that needs more than its request
    (censored) is killed at the request: the user's limit, not harp's.
    ``harp_killed`` marks jobs stopped below their request, which the rule
    never does (kept as a check, 0 by construction).  ``lead_s``: harpd's
    watcher extends a job once less than that is left of its limit, so a
    limit holds a job only if it needs at most ``limit - lead_s``.  With
    ``look_s`` and the jobs' start times ``started_at``, it extends at its
    first look within that lead (``watcher_looks``, as ``hold_budget`` and
    the queue simulation count it): a job that ends before that look was
    not extended.  Later extensions are taken at the same distance from
    their limit as the first.
    """
    req = np.asarray(request, float)
    start = np.asarray(start, float)
    cut = np.isfinite(start) & (start < req)  # only harp's limits are watched (the request is the kill time)
    lead = np.full(len(start), max(float(lead_s), 0.0))
    if started_at is not None and look_s > 0 and lead_s > 0:
        t0 = np.where(cut, np.asarray(started_at, float), 0.0)
        first_limit = np.where(cut, start, 0.0)
        lead = t0 + first_limit - watcher_looks(t0, lead_s, look_s, t0 + first_limit)
    need = np.asarray(need, float) + np.where(cut, lead, 0.0)
    cens = np.asarray(censored, bool)
    first = np.where(np.isfinite(start), start, req)
    kill_at = req if cap is None else np.fmin(req, np.asarray(cap, float))
    n_ext = max(int(max_extensions), 1)
    # the doublings: up to n_ext − 1 of them (an attempt per limit tried)
    _, fitted, last, attempts = simulate_many(need, first, req, kill_at, Outcome.TIMEOUT, n_ext, cens)
    ext = attempts - 1
    final = np.where(np.isfinite(last), last, req)
    # the last extension: straight to the kill time, for what still does not fit below it
    to_kill = ~fitted & np.isfinite(kill_at) & (final < kill_at)
    final = np.where(to_kill, kill_at, final)
    ext = np.where(to_kill, ext + 1, ext)
    harp_killed = ~fitted & ~cens & (final < np.where(np.isfinite(kill_at), kill_at, math.inf))
    return final, ext, harp_killed
