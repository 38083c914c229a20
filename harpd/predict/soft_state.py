"""The live daemon's soft-limit state: what the replay's walk knows, kept between requests.

``harpd.replay.soft_walk.soft_starts`` decides a start limit from three things
beyond the job's own history: the budget controller's scale ``s``, the
template's siblings running right now, and the usual stake.  In the
replay they come from the trace's timeline; in harpd they come from the
watcher (``harpd.watch``: one Slurm listing per interval, and the outcomes
of jobs harp passed) and live here, between the watcher that feeds them and
the predictor that reads them on every request.

``s`` is kept in the store (meta ``soft.scale``), so a restart does not
forget what the extensions taught it; the siblings in flight, and the
queue's load that the queue rule weighs a cut against
(``harpd.predict.queue_policy``), are only trusted while the watcher keeps
listing the queue (``max_age_s``).  The queue rule so reads the watcher's
own listing: no squeue of its own, none on a submission's path.
Thread-safe: the watcher writes from the scheduler's thread, requests read.
"""

from __future__ import annotations

import math
import threading
import time
from typing import Any, TypedDict

from harpd.predict.soft import BudgetController, SoftPolicy, StakeMean
from harpd.slurm.queue_load import QueueLoad

__all__ = ["SoftState", "SCALE_KEY"]

#: store meta key of the budget controller's scale (log)
SCALE_KEY = "soft.scale"
#: a user's budget is judged on their last USER_WINDOW harp-cut jobs, once they have USER_MIN_JOBS
USER_WINDOW, USER_MIN_JOBS = 50, 10
USER_CACHE_S = 60.0  # one store query per user and minute, not per request


def user_over_budget(store: Any, user: str, budget: float) -> tuple[int, int] | None:
    """(extended, jobs) when ``user``'s last ``USER_WINDOW`` harp-cut jobs were extended
    past ``budget`` (a share), once they have ``USER_MIN_JOBS``; else None.  The one rule
    behind the decision (``SoftState``) and what ``harp report`` says about it."""
    jobs, extended = store.user_extensions(user, USER_WINDOW)
    return (extended, jobs) if jobs >= USER_MIN_JOBS and extended > budget * jobs else None


class SoftStateExplain(TypedDict):
    """What the soft policy learnt (``health``'s ``limits``, a soft decision's explanation)."""

    budget_scale: float  # the budget controller's scale on every soft bound
    users_not_cut: list[str]  # users past their extension budget: their jobs keep their request
    user_extension_budget: float
    min_limit_s: float


class SoftState:
    """Budget scale, siblings in flight, usual stake: one per harpd, shared by the predictor and the watcher."""

    def __init__(self, policy: SoftPolicy, store: Any = None, max_age_s: float = 300.0) -> None:
        self.policy = policy
        self.store = store
        self.max_age_s = float(max_age_s)
        s = 0.0
        if store is not None:
            try:
                got = store.get_meta(SCALE_KEY)
                s = float(got) if got is not None and math.isfinite(float(got)) else 0.0
            except (TypeError, ValueError):
                s = 0.0
        self._ctl = BudgetController(policy, s)
        self._saved = self._ctl.s
        self._usual = StakeMean(policy.stake_window)
        self._running: dict[str, tuple[int, float]] = {}
        self._running_at = -math.inf
        self._queue: QueueLoad | None = None
        self._queue_at = -math.inf
        self._lock = threading.Lock()
        self._users: dict[str, tuple[float, tuple[int, int] | None]] = {}  # user -> (when, over budget)

    # -- the budget controller ---------------------------------------------------
    @property
    def scale(self) -> float:
        """The controller's scale (log) added to every soft bound."""
        return self._ctl.s

    def extended(self) -> None:
        """A job harp sized outgrew its start limit (the watcher made its first extension)."""
        with self._lock:
            self._ctl.extended()

    def ended(self) -> None:
        """A job that passed through harp ended without an extension."""
        with self._lock:
            self._ctl.ended()

    def save(self) -> None:
        """Write the scale to the store when it moved (the watcher calls this once per tick)."""
        with self._lock:
            s = self._ctl.s
            if self.store is None or s == self._saved:
                return
            self._saved = s
        self.store.set_meta(SCALE_KEY, s)

    # -- siblings in flight ------------------------------------------------------
    def set_running(self, running: dict[str, tuple[int, float]], now: float | None = None) -> None:
        """The watcher's latest listing: template key -> (jobs running, longest run so far in seconds)."""
        with self._lock:
            self._running = dict(running)
            self._running_at = time.time() if now is None else now

    def running(self, template: str, now: float | None = None) -> tuple[int, float]:
        """Siblings of ``template`` in flight and the longest run so far, as of the last listing.

        (0, 0.0) when the watcher has not listed the queue recently: no
        evidence is better than stale evidence.
        """
        now = time.time() if now is None else now
        with self._lock:
            if now - self._running_at > self.max_age_s:
                return 0, 0.0
            n, longest = self._running.get(template, (0, 0.0))
            return n, (longest + max(0.0, now - self._running_at)) if n else 0.0

    # -- the queue's load --------------------------------------------------------
    def set_queue(self, load: QueueLoad, now: float | None = None) -> None:
        """The queue's load in the watcher's latest listing (``harpd.slurm.queue_load``)."""
        with self._lock:
            self._queue = load
            self._queue_at = time.time() if now is None else now

    def queue(self, now: float | None = None) -> QueueLoad | None:
        """The queue's load as of the last listing; None when the watcher has not listed it within ``max_age_s``.

        None makes the queue rule stand aside (harp cuts as without it): a
        stale queue could give back cuts for a queue that has drained.
        """
        now = time.time() if now is None else now
        with self._lock:
            return self._queue if now - self._queue_at <= self.max_age_s else None

    # -- the usual stake ---------------------------------------------------------
    def usual_stake(self, stake: float) -> float:
        """Count one decided job's stake; returns the running mean including it."""
        with self._lock:
            return self._usual.add(stake)

    # -- one user's budget -----------------------------------------------------
    def user_over_budget(self, user: str, now: float | None = None) -> tuple[int, int] | None:
        """(extended, jobs) when ``user``'s jobs outgrew harp's limits beyond their budget; else None.

        The site budget is a share over everyone; one user who keeps
        overrunning harp's limits (or games the plan by stating long requests
        that harp then extends) would have the others pay for it.  Past
        ``policy.user_extension_budget`` of their recent harp-cut jobs, harp
        stops cutting them: their jobs run with their own request.
        """
        if self.store is None or not user:
            return None
        now = time.time() if now is None else now
        with self._lock:
            cached = self._users.get(user)
        if cached is not None and now - cached[0] < USER_CACHE_S:
            return cached[1]
        over = user_over_budget(self.store, user, self.policy.user_extension_budget)
        with self._lock:
            self._users[user] = (now, over)
        return over

    def explain(self) -> SoftStateExplain:
        with self._lock:
            over = sorted(u for u, (_, o) in self._users.items() if o is not None)
        return SoftStateExplain(
            budget_scale=round(math.exp(self._ctl.s), 3),
            users_not_cut=over,
            user_extension_budget=self.policy.user_extension_budget,
            # the smallest start limit: the watcher's lead and interval (SoftPolicy.min_limit_s)
            min_limit_s=self.policy.min_limit_s,
        )
