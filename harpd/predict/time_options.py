"""sbatch's options that give a job's time limit a meaning harp must keep.

harp shortens ``--time`` to what a job is predicted to need.  Three sbatch
options say something about that limit beyond its length, and a cut must not
change what they mean:

* ``--time-min``: slurmctld refuses a limit below it, so harp never proposes
  one (a refused request costs the user a second sbatch call);
* ``--signal=[B:]SIG@N``: slurmctld signals the job N seconds before its
  current end time.  Under hard limits the cut leaves room for that warning:
  the limit is at least the predicted need plus N (and never below N plus the
  time floor), so the signal comes when the job was predicted to be done, not
  in the middle of the work.  A client that judges the signal by its own
  clock keeps its time: submitit counts a USR2 as its timeout only once its
  function has run min(0.8·T, T − 10 min) of its own timeout T (the job's
  ``--time``, so a cut does not move it), takes an earlier one for a
  preemption and requeues the function from its start, again and again under
  a cut limit, and after it fails a function that cannot checkpoint as
  FAILED, which harp cannot run again (#51).  Under soft limits harpd extends a job only
  shortly before its limit, after slurmctld has already sent the signal from
  the shortened end time, so a job asking for a signal keeps its time;
* ``--deadline``: slurmctld ends a job that cannot finish by its deadline.
  A shorter limit only lets it start sooner, but under soft limits an
  extension could carry the job past a deadline it would never have started
  against as written: such a job keeps its time too.

One function, used by the live decision (and so by replay and re-sizing,
which call it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from harpd.features.workflow import SUBMITIT_MODULE

__all__ = ["fit_time", "kept_under_soft_limits", "is_submitit", "SUBMITIT_KEPT"]

#: why a submitit job asking for a signal keeps its time (``fit_time``)
SUBMITIT_KEPT = (
    "time kept: submitit takes an earlier --signal for a preemption, and a later one fails a function "
    "that cannot checkpoint, which harp cannot run again"
)


def is_submitit(commands: Sequence[str] | None) -> bool:
    """Whether the job runs submitit's worker (``python -m submitit.core._submit``)."""
    return any(SUBMITIT_MODULE in str(c) for c in commands or ())


def kept_under_soft_limits(rq: Any) -> str | None:
    """Why a job keeps its requested time under soft limits (None: harp may cut it)."""
    if rq.signal_s is not None:
        return (
            "asks for a signal before its end (--signal): under soft limits the signal would come "
            "before harpd extends it, so its time is kept"
        )
    if rq.deadline:
        return "has a --deadline: under soft limits an extension could cross it, so its time is kept"
    return None


def fit_time(value: float, rq: Any, floor_s: int, commands: Sequence[str] | None = None) -> tuple[float, str | None]:
    """The limit (seconds) that keeps ``--signal`` and ``--time-min`` meaningful, and why it moved.

    ``value`` is the predicted need; the result is never below the user's
    ``--time-min`` and leaves ``--signal``'s N seconds after the need; a
    submitit job (``commands``) asking for a signal keeps its requested time.
    """
    why: list[str] = []
    if rq.signal_s:
        room = max(value + rq.signal_s, rq.signal_s + floor_s)
        if room > value:
            why.append(f"+{rq.signal_s}s for --signal's warning")
            value = room
        if rq.time_s and is_submitit(commands) and value < float(rq.time_s):
            # a signal before submitit's own threshold is a preemption to it (the function requeued from its
            # start, again and again); after it, a timeout that fails a function that cannot checkpoint, as
            # FAILED, which harp cannot run again: no cut is safe for it
            value = float(rq.time_s)
            why[:] = [SUBMITIT_KEPT]  # the request itself: the warning's room above the need is moot
    if rq.time_min_s and value < rq.time_min_s:
        why.append(f"raised to --time-min {rq.time_min_s}s")
        value = float(rq.time_min_s)
    return value, ("; ".join(why) or None)
