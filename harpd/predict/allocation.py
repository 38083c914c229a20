"""Guard rails: from a model's upper bound to what harp actually asks Slurm for.

A model only says "this job probably needs at most X".  Whether harp acts on
it is decided here, the same way for the live daemon and for ``harp replay``
(both reach ``allocate`` through the decision kernel, ``harpd.predict.decide``,
job by job), so replay figures describe the policy the daemon runs:

* cold start: fewer than ``min_history`` finished runs of the job's signature
  → the user's request stands;
* no finite bound (the model cannot bound this job) → the request stands;
* the bound is close to the request (≥ ``leave_alone_ratio`` of it) → the
  request stands: a small cut saves little and any miss costs a whole run;
* never below the floor (1 min, 100 MB), never above the partition limit;
* shrink only when ``allow_shrink``; raise at most to
  ``max_raise_factor`` × request (1.0, the default, never raises).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from harpd.config import PredictSettings

#: ``[predict]``'s defaults, written once in harpd.config: a Guard built without settings guards as harpd does
PREDICT_DEFAULTS = PredictSettings()

#: what ``allocate`` says set a value it returns: the bound itself, or the rail that moved it
BOUND, REQUEST_FLOOR, FLOOR, LIMIT = "bound", "request floor", "floor", "limit"


#: the history rule's margin over the most a program's last runs used (live and replay)
MARGIN = 1.1


@dataclass(frozen=True, slots=True)
class Guard:
    """The guard-rail settings of one resource (from ``settings.predict``)."""

    min_history: int = PREDICT_DEFAULTS.min_history
    floor: float = float(PREDICT_DEFAULTS.floor_time_s)
    allow_shrink: bool = PREDICT_DEFAULTS.allow_shrink
    max_raise_factor: float = PREDICT_DEFAULTS.max_raise_factor
    leave_alone_ratio: float = PREDICT_DEFAULTS.leave_alone_ratio
    margin: float = 1.0  # multiply the bound (e.g. 1.05 for slack on top of it)
    # added to the bound (the resource's unit) before the other rails: under soft limits the
    # watcher's lead, since harpd extends a job once less than that is left of its limit, so a
    # limit holds a job that needs its bound only with the lead on top (``soft.soft_guard``)
    headroom: float = 0.0
    # time: never cut below request / 2^(attempts−1), so escalation walks back
    # to the user's request within the attempts and no job that fits its
    # request is ever lost (0 disables).  Memory has none: its last attempt
    # runs at the request whatever the cut (``recovery.escalation``)
    min_fraction: float = 0.25

    @classmethod
    def from_settings(cls, predict: PredictSettings, resource: str, max_attempts: int | None = 3) -> Guard:
        floor = float(predict.floor_time_s if resource == "time" else predict.floor_mem_mb)
        return cls(
            min_history=predict.min_history,
            floor=floor,
            allow_shrink=predict.allow_shrink,
            max_raise_factor=predict.max_raise_factor,
            leave_alone_ratio=predict.leave_alone_ratio,
            min_fraction=(0.5 ** (max(int(max_attempts), 1) - 1) if max_attempts and resource == "time" else 0.0),
        )


def allocate(
    request: float | None,
    upper_log: float,
    n_history: int,
    limit: float | None,
    guard: Guard,
    leave_alone_ratio: float | None = None,
) -> tuple[float | None, str]:
    """The allocation harp should set, or None to keep the request, and why.

    With a value, "why" names what set it: ``BOUND``, or the rail that moved
    the bound (``REQUEST_FLOOR``: ``min_fraction`` of the request; ``FLOOR``;
    ``LIMIT``), so the decision's reason can say so.

    ``upper_log`` is the model's bound as log(need / request) when there is a
    request, log(need) otherwise (see ``harpd.models.base``).
    ``leave_alone_ratio`` lowers the guard's (a calibrated model's own θ).
    """
    keep_at = guard.leave_alone_ratio if leave_alone_ratio is None else min(leave_alone_ratio, guard.leave_alone_ratio)
    if n_history < guard.min_history:
        return None, f"cold start: {n_history} of {guard.min_history} runs needed"
    if upper_log is None or not math.isfinite(upper_log):
        return None, "no confident bound for this job"
    req = 0.0 if request is None else request  # a float for the checker; has_req guards every use
    has_req = req > 0
    ratio = math.exp(upper_log) * guard.margin
    if guard.headroom:
        ratio += guard.headroom / req if has_req else guard.headroom
    value = ratio * req if has_req else ratio
    if has_req:
        if ratio >= keep_at and ratio <= 1.0:
            return None, f"{_bound_words(guard)} is {ratio:.0%} of the request: kept"
        if ratio > 1.0:
            if guard.max_raise_factor <= 1.0:
                return None, f"{_bound_words(guard)} is above the request; raising is off"
            value = min(value, req * guard.max_raise_factor)
        elif not guard.allow_shrink:
            return None, "shrinking is off"
    by = BOUND  # which rail set the value, for the decision's reason
    if has_req and guard.min_fraction > 0 and value < req * guard.min_fraction:
        value, by = req * guard.min_fraction, REQUEST_FLOOR
    if value < guard.floor:
        value, by = guard.floor, FLOOR
    if limit is not None and limit > 0 and value > limit:
        value, by = limit, LIMIT
    if has_req and abs(value - req) < 1e-9 * max(req, 1.0):
        return None, "same as the request"
    if has_req and value > req and guard.max_raise_factor <= 1.0:
        return None, "floor is above the request: kept"
    return float(value), by


def _bound_words(guard: Guard) -> str:
    """What was compared with the request: the bound, or the bound and the watcher's lead."""
    return f"bound with the watcher's {guard.headroom:g} s lead" if guard.headroom else "bound"
