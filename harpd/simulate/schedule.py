"""A simulated schedule and the queue figures computed from it.

The definitions are fixed here, once, because the literature is loose about
them and a comparison between policies is only fair when every row uses the
same ones:

* **wait**: from the job's *original* submission to the start of its *last*
  run (the run that completes, or the last one killed).  With
  resubmissions this is what the user lives through: the killed runs and the
  time spent queued again all count as waiting.  Without kills it is the
  usual submit → start.
* **run**: the length of that last run (the true runtime when the job
  completed; the limit it was killed at otherwise).
* **bounded slowdown** (Feitelson et al.): ``max(1, (wait + run) / max(run,
  10 s))``, so that very short jobs do not dominate the mean.
* **p95 wait**: ``numpy.percentile(wait, 95)`` (linear interpolation).
* **utilization**: processor-seconds held by runs (killed runs included: the
  processors were busy) over ``P × makespan``, where the makespan runs from the
  first submission to the last end.  **useful utilization** counts only runs
  that completed.
* **delayed by an extension**: a job that started later than the reservation
  EASY gave it when it first became the blocked head of the queue.  EASY
  promises that start; with limits enforced exactly the promise always holds
  (running jobs end by their planned end, backfill never pushes the
  reservation), so only a soft-limit extension, which moves a running job's
  planned end later, can break it.
* **delayed by a kill**: a job killed at its limit and started again; its
  completing start came later than its first one.
* **delayed starts**: jobs delayed by either.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SLOWDOWN_BOUND_S = 10.0


@dataclass(frozen=True)
class Summary:
    """The figures of one simulated policy (seconds unless said otherwise)."""

    policy: str
    procs: int
    jobs: int  # accepted (simulated) jobs
    rejected: int  # wider than the machine, never queued
    mean_wait_s: float
    p95_wait_s: float
    mean_bounded_slowdown: float
    utilization: float
    useful_utilization: float
    makespan_s: float
    kills: int  # limit kills, all runs
    extensions: int
    abandoned: int  # jobs whose last run was killed (not resubmitted)
    delayed_by_extension: int
    delayed_by_kill: int
    delayed_starts: int


@dataclass(frozen=True)
class Schedule:
    """Per-job outcome of one simulation; NaN/0 for rejected jobs."""

    policy: str
    procs: int
    width: np.ndarray  # processors per job
    submit: np.ndarray  # original submission
    first_start: np.ndarray
    start: np.ndarray  # start of the last run
    end: np.ndarray
    kills: np.ndarray
    extensions: np.ndarray
    runs: np.ndarray  # how many times the job started
    completed: np.ndarray  # last run reached the true runtime
    rejected: np.ndarray
    promised_start: np.ndarray  # first EASY reservation of the last run; NaN if never blocked at the head
    busy_proc_s: float
    useful_proc_s: float

    @property
    def accepted(self) -> np.ndarray:
        return ~self.rejected

    @property
    def wait(self) -> np.ndarray:
        return self.start - self.submit

    @property
    def run(self) -> np.ndarray:
        return self.end - self.start

    @property
    def bounded_slowdown(self) -> np.ndarray:
        run = self.run
        return np.maximum(1.0, (self.wait + run) / np.maximum(run, SLOWDOWN_BOUND_S))

    @property
    def delayed_by_extension(self) -> np.ndarray:
        with np.errstate(invalid="ignore"):
            return self.start > self.promised_start

    @property
    def delayed_by_kill(self) -> np.ndarray:
        return self.runs > 1

    def summary(self) -> Summary:
        ok = self.accepted
        n = int(ok.sum())
        if n:
            wait = self.wait[ok]
            makespan = float(self.end[ok].max() - self.submit[ok].min())
            mean_wait, p95 = float(wait.mean()), float(np.percentile(wait, 95))
            bsld = float(self.bounded_slowdown[ok].mean())
        else:
            makespan, mean_wait, p95, bsld = 0.0, float("nan"), float("nan"), float("nan")
        cap = self.procs * makespan
        by_ext, by_kill = self.delayed_by_extension[ok], self.delayed_by_kill[ok]
        return Summary(
            policy=self.policy,
            procs=self.procs,
            jobs=n,
            rejected=int(self.rejected.sum()),
            mean_wait_s=mean_wait,
            p95_wait_s=p95,
            mean_bounded_slowdown=bsld,
            utilization=self.busy_proc_s / cap if cap > 0 else float("nan"),
            useful_utilization=self.useful_proc_s / cap if cap > 0 else float("nan"),
            makespan_s=makespan,
            kills=int(self.kills.sum()),
            extensions=int(self.extensions.sum()),
            abandoned=int((ok & ~self.completed).sum()),
            delayed_by_extension=int(by_ext.sum()),
            delayed_by_kill=int(by_kill.sum()),
            delayed_starts=int((by_ext | by_kill).sum()),
        )
