"""What the simulator is fed: the jobs as they happened, and a limit policy.

The jobs (``Workload``) are the part every policy shares: when each job was
submitted, how many processors it asked for, and how long it really runs.
The policy (``LimitPolicy``) is what differs between the rows of a queue
comparison: the limit the scheduler plans with at submission, and what
happens when a running job reaches its limit.  Keeping the two apart lets
one trace be simulated under the users' requests, exact runtimes and harp's
limits without copying it.

Limits are enforced two ways, as Slurm can be configured:

* ``"hard"``: a job still running at its limit is killed there (it held its
  processors until then).  ``on_limit`` may resubmit it at once with a new,
  larger limit (harp's escalation); returning ``None`` abandons it.
* ``"soft"``: a job reaching its limit is not killed; ``on_limit`` returns the
  extended limit the scheduler plans with from that moment on, and the job
  ends at its true runtime.  Returning ``None`` kills it there instead (the
  extension was refused, e.g. at the site's maximum).

Exact runtimes are simply a hard policy whose limits equal the runtimes.

A policy may decide each job's limit *when the job is submitted*, from the
queue as it then is (``on_submit``, a closed loop): harpd decides at the
submission with what it sees of the queue, and a policy that reads the queue
can only be judged on the queue its own earlier decisions made.  Without it
(open loop) the limits are fixed before the simulation starts.

A soft policy may model harpd's watcher (``lead_s``, ``look_s``): it looks at
the running jobs every ``look_s`` seconds (at whole multiples of it, one clock
for all jobs) and extends a job once less than ``lead_s`` is left of its
limit, so an extension comes *before* the limit, at the first look after
``limit - lead`` (``watcher_look``), and a job still running then is
extended even if it would have ended within its limit.  Without them
(0) a job is extended the moment it reaches its limit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

#: ``on_limit(job, limit, events)``: ``job`` is the job's index in the
#: workload, ``limit`` the limit it has just reached (seconds of run), and
#: ``events`` how many limit events (kills or extensions) it had before this
#: one.  Returns the new limit, which must be larger than ``limit``, or None.
LimitHook = Callable[[int, float, int], "float | None"]

#: ``on_submit(job, pending_jobs, backlog_core_s, running_jobs, now)``: the
#: limit (seconds) ``job`` is submitted with, from the queue at its first
#: submission (not at a resubmission): the jobs waiting and the
#: processor-seconds of their current limits, the jobs running, the clock.
#: Plain numbers, not a record: the simulator stays below harpd's decisions,
#: and the caller builds its own view of the queue from them.
SubmitHook = Callable[[int, int, float, int, float], float]

Mode = Literal["hard", "soft"]


@dataclass(frozen=True)
class Workload:
    """Jobs in submission order of the trace (any order is accepted).

    ``submit`` and ``runtime`` are seconds, ``procs`` processors.  A job whose
    runtime is 0 still passes through the queue (it starts and ends at once).
    """

    submit: np.ndarray
    procs: np.ndarray
    runtime: np.ndarray

    def __post_init__(self) -> None:
        submit = np.asarray(self.submit, dtype=np.float64)
        procs = np.asarray(self.procs, dtype=np.int64)
        runtime = np.asarray(self.runtime, dtype=np.float64)
        if not (submit.shape == procs.shape == runtime.shape) or submit.ndim != 1:
            raise ValueError("submit, procs and runtime must be 1-D arrays of one length")
        if not np.all(np.isfinite(submit)) or not np.all(np.isfinite(runtime)):
            raise ValueError("submit and runtime must be finite")
        if np.any(runtime < 0):
            raise ValueError(f"negative runtime for job {int(np.argmax(runtime < 0))}")
        if np.any(procs < 1):
            raise ValueError(f"job {int(np.argmax(procs < 1))} asks for fewer than 1 processor")
        object.__setattr__(self, "submit", submit)
        object.__setattr__(self, "procs", procs)
        object.__setattr__(self, "runtime", runtime)

    def __len__(self) -> int:
        return int(self.submit.shape[0])


@dataclass(frozen=True)
class LimitPolicy:
    """The limit each job is submitted with, and what happens when it is reached."""

    limit: np.ndarray
    mode: Mode = "hard"
    on_limit: LimitHook | None = field(default=None, compare=False)
    name: str = ""
    lead_s: float = 0.0  # soft: the watcher extends this long before the limit (``watcher_look``)
    look_s: float = 0.0  # soft: and looks every this many seconds
    # closed loop: the limit decided at each job's submission (``limit`` is then only its fallback shape)
    on_submit: SubmitHook | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.lead_s < 0 or self.look_s < 0:
            raise ValueError("the watcher's lead and interval are 0 seconds or more")
        limit = np.asarray(self.limit, dtype=np.float64)
        if limit.ndim != 1:
            raise ValueError("limit must be a 1-D array")
        # a zero or infinite limit would make the reservation meaningless:
        # EASY needs every running job to have a finite planned end
        if not np.all(np.isfinite(limit)) or np.any(limit <= 0):
            raise ValueError("every limit must be finite and > 0 seconds")
        if self.mode not in ("hard", "soft"):
            raise ValueError(f"mode must be 'hard' or 'soft', not {self.mode!r}")
        object.__setattr__(self, "limit", limit)
