"""Soft limits: the policy harpd decides with (decide again at the start, extend instead of kill).

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
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, TypedDict

import numpy as np

from harpd.config import WatchSettings
from harpd.features.history import COL
from harpd.predict.allocation import PREDICT_DEFAULTS, Guard

_FLOAT_MAX = sys.float_info.max

if TYPE_CHECKING:
    from harpd.config import PredictSettings

#: more extensions than this per job is not a chain but a loop (each doubles)
MAX_EXTENSIONS = 64


#: ``[watch]``'s defaults (harpd.config): the lead and interval a policy built without settings assumes
_WATCH_DEFAULTS = WatchSettings()


class SoftPolicyExplain(TypedDict):
    """``SoftPolicy.explain``: the knobs of a soft decision (``--harp-explain``, ``harp replay``'s report)."""

    limits: str  # "soft"
    quantile: float
    extension_budget: float
    recent_runs: int
    recent_margin: float
    burst_tilt: float
    stake_tilt: float
    max_extensions: int
    min_limit_s: float
    watcher_lead_s: float


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

    quantile: float = PREDICT_DEFAULTS.soft_quantile
    extension_budget: float = PREDICT_DEFAULTS.soft_extension_budget
    recent_runs: int = 5
    recent_margin: float = PREDICT_DEFAULTS.soft_recent_margin
    min_recent: int = 3
    # log-bound added per log(1 + siblings of the template running at the start)
    burst_tilt: float = PREDICT_DEFAULTS.soft_burst_tilt
    # log-bound taken off per unit of log(cores x request) above the usual (and added below it)
    # off by default: on a loaded machine the deeper cuts of wide, long jobs
    # extend them into the head's reservation (docs/metrics.md, 'Queue')
    stake_tilt: float = PREDICT_DEFAULTS.soft_stake_tilt
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
    max_extensions: int = PREDICT_DEFAULTS.soft_max_extensions
    # one user's share of extended jobs past which harp stops cutting them (SoftState.user_over_budget)
    user_extension_budget: float = PREDICT_DEFAULTS.soft_user_extension_budget
    # harpd's watcher (``[watch]``): it extends a job once less than ``lead_s`` is
    # left of its limit (``margin_s``), looking every ``look_s`` (``interval_s``)
    lead_s: float = _WATCH_DEFAULTS.margin_s
    look_s: float = _WATCH_DEFAULTS.interval_s

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
        watch = watch or _WATCH_DEFAULTS
        return cls(
            lead_s=float(watch.margin_s),
            look_s=float(watch.interval_s),
            quantile=predict.soft_quantile,
            extension_budget=predict.soft_extension_budget,
            recent_margin=predict.soft_recent_margin,
            burst_tilt=predict.soft_burst_tilt,
            stake_tilt=predict.soft_stake_tilt,
            max_extensions=predict.soft_max_extensions,
            user_extension_budget=predict.soft_user_extension_budget,
        )

    def explain(self) -> SoftPolicyExplain:
        return SoftPolicyExplain(
            limits="soft",
            quantile=self.quantile,
            extension_budget=self.extension_budget,
            recent_runs=self.recent_runs,
            recent_margin=self.recent_margin,
            burst_tilt=self.burst_tilt,
            stake_tilt=self.stake_tilt,
            max_extensions=self.max_extensions,
            min_limit_s=self.min_limit_s,
            watcher_lead_s=self.lead_s,
        )


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


def recent_bound(x: Sequence[float], log_bound: float, policy: SoftPolicy) -> tuple[float, str]:
    """The soft policy's bound (log need/request) from one job's history features, and its words.

    The template's (same user and request) most recent runs decide when
    there are enough of them, as in ``start_bound``; else the model's own
    bound stands.  harpd and the replay's champion walk both call it.
    """
    n_runs = math.expm1(x[COL["r_n"]]) if not math.isnan(x[COL["r_n"]]) else 0.0
    rmax = x[COL["r_max5"]]
    if n_runs + 0.5 >= policy.min_recent and not math.isnan(rmax):
        return float(rmax) + math.log(policy.recent_margin), f"{policy.recent_margin:g} x the most of the last runs"
    return log_bound, "model bound"
