"""Soft limits in the replay, vectorised over a trace: decide again at the start, extend instead of kill.

The policy and its per-job pieces live in ``harpd.predict.soft`` (harpd runs
them); this module is the replay's walk over a whole trace with them
(``soft_starts``, ``extend``), which harpd never imports.
"""

from __future__ import annotations

import math
import sys
from collections import deque

import numpy as np

from harpd.predict.allocation import Guard
from harpd.predict.extension import next_extension
from harpd.predict.soft import (
    MAX_EXTENSIONS,
    BudgetController,
    SoftPolicy,
    StakeMean,
    running_bound,
    soft_guard,
    stake_of,
    tilt,
)
from harpd.replay.dataset import Prepared
from harpd.watcher_timing import watcher_look, watcher_looks

_FLOAT_MAX = sys.float_info.max


def _timed(prep: Prepared) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The trace's template keys, start and end times; ValueError when ``prepare`` did not keep them."""
    if prep.template is None or prep.start is None or prep.end is None:
        raise ValueError("soft limits need template keys and end times: prepare(..., keep_templates=True)")
    return prep.template, prep.start, prep.end


def recent_at(prep: Prepared, at: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per job: how many runs of its template had finished strictly before ``at[i]``
    (at most ``k`` counted) and the most that the last ``k`` of them used, as a
    share of the request (a run killed at its request counts as 1: all of it).

    Needs the template keys (``prepare(..., keep_templates=True)``).
    """
    tmpl, _, end = _timed(prep)
    n = prep.n
    ratio = np.where(prep.censored, 1.0, prep.need / np.where(np.isfinite(prep.request), prep.request, np.nan))
    fin = prep.finish_seq
    fin_end = end[fin]
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


def running_at(prep: Prepared) -> tuple[np.ndarray, np.ndarray]:
    """Per job, at its start: how many jobs of its template were running, and the longest run so far among them.

    What harpd's watcher sees of the queue when it re-sizes a pending job
    (one listing per interval): siblings that started and have not ended.
    Needs the template keys (``prepare(..., keep_templates=True)``).
    """
    import heapq

    tmpl, start, end = _timed(prep)
    n = prep.n
    t = np.concatenate([end, start])
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
            elapsed[i] = float(start[i]) - heap[0][0]
            count[i] = sum(1 for _, j in heap if not ended[j])
        heapq.heappush(heap, (float(start[i]), i))
        if len(heap) > 64 and count[i] < len(heap) // 2:  # drop the ended ones now and then
            started[tmpl[i]] = heap = [x for x in heap if not ended[x[1]]]
            heapq.heapify(heap)
    return count, elapsed


def hold_budget(
    prep: Prepared,
    bound_log: np.ndarray,
    guard: Guard,
    policy: SoftPolicy,
    trace: list[float] | None = None,
    in_flight: np.ndarray | None = None,
    n_hist: np.ndarray | None = None,
) -> np.ndarray:
    """Start limits from ``bound_log`` under a controller that holds the extension budget.

    Walks starts, extensions and ends in time order.  At its start a job
    gets the decision kernel's limit (``harpd.predict.decide``, as harpd's
    start decision: the soft guard's rails, whole minutes) for the bound
    ``bound + s + tilt``; ``s`` is the
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

    from harpd.predict.decide import TIME, KernelInput, allocation

    _, start, end = _timed(prep)
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
    t = np.concatenate([end, start])
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
                v = allocation(
                    TIME, KernelInput(float(req[i]), float(b) + ctl.s + adj, int(nh[i]), lim, g, soft=True)
                ).amount
                if v is not None:
                    out[i] = v
                    # the watcher extends it at its first look within its lead of the limit
                    t0 = float(start[i])
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
    prep: Prepared, up_log: np.ndarray, guard: Guard, policy: SoftPolicy, trace: list[float] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """harp's start limits under soft limits, as the daemon decides them; and which jobs the start-time rule sized.

    The template's recent runs (else the model's bound ``up_log``), never
    below what a running sibling already used, under the budget controller
    with the burst and stake tilts; each job with the history it has at its
    start.
    """
    count, mx = recent_at(prep, _timed(prep)[1], policy.recent_runs)
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
    outgrows its limit is raised by harpd's extender's own rule
    (``harpd.predict.extension.next_extension``, job by job: its
    ``max_extensions``-th extension goes straight to its request, capped by
    ``cap``, in whole minutes).  A job that needs more than its request
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
    caps = np.full(len(req), np.nan) if cap is None else np.asarray(cap, float)
    n_ext = max(int(max_extensions), 1)

    def holds(limit: np.ndarray) -> np.ndarray:
        # a censored run needed more than it was given: only a larger limit is known to hold it
        return np.where(cens, limit > need, limit >= need)

    final = first.copy()
    ext = np.zeros(len(req), np.int64)
    # harpd's extender's rule, job by job, for each of harp's limits that does not hold its job
    for j in np.flatnonzero(cut & ~holds(first)).tolist():
        limit, made, c, n, lower = float(first[j]), 0, float(caps[j]), float(need[j]), bool(cens[j])
        while made <= n_ext and not (limit > n if lower else limit >= n):
            step = next_extension(limit, float(req[j]), c if math.isfinite(c) else None, made, n_ext)
            if step is None:
                break
            limit, made = float(step.limit_s), made + 1
        final[j], ext[j] = limit, made
    fitted = holds(final)
    harp_killed = ~fitted & ~cens & (final < np.where(np.isfinite(kill_at), kill_at, math.inf))
    return final, ext, harp_killed
