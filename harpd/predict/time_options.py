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
  in the middle of the work.  Under soft limits harpd extends a job only
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

from typing import Any

__all__ = ["fit_time", "kept_under_soft_limits"]


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


def fit_time(value: float, rq: Any, floor_s: int) -> tuple[float, str | None]:
    """The limit (seconds) that keeps ``--signal`` and ``--time-min`` meaningful, and why it moved.

    ``value`` is the predicted need; the result is never below the user's
    ``--time-min`` and leaves ``--signal``'s N seconds after the need.
    """
    why: list[str] = []
    if rq.signal_s:
        room = max(value + rq.signal_s, rq.signal_s + floor_s)
        if room > value:
            why.append(f"+{rq.signal_s}s for --signal's warning")
            value = room
    if rq.time_min_s and value < rq.time_min_s:
        why.append(f"raised to --time-min {rq.time_min_s}s")
        value = float(rq.time_min_s)
    return value, ("; ".join(why) or None)
