"""The cost a first allocation incurs under the escalation rule.

harp's calibrated model (``harpd.models.conformal``) steers its leave-alone
ratio on what a cut costs when it falls short: the attempts that
``harpd.recovery.escalation`` kills before one fits.  The replay's metric
(``harpd.replay.metric``) charges exactly the same cost, so this lives
below both: the model is tuned on the figure it is later scored by.
"""

from __future__ import annotations

import numpy as np

from harpd.records import Outcome
from harpd.recovery.escalation import simulate, simulate_many

#: disruption cost of one job that runs out, in units of the average job's use
DISRUPTION = 1.0


def extra_consumption(
    first: float, need: float, request: float | None, censored: bool, resource: str = "time", max_attempts: int = 3
) -> float:
    """What harp's first allocation costs on top of what the user's request consumed.

    Zero when the first allocation fits; else the killed attempts of the
    escalation chain (a censored job is charged for its attempts below the
    request, the attempt at the request being what the user paid anyway).
    """
    has_req = request is not None and request > 0
    if censored:
        if first > need:
            return 0.0
    elif first >= need:
        return 0.0
    outcome = Outcome.TIMEOUT if resource == "time" else Outcome.OOM
    cap = request if (censored and has_req) else None
    ch = simulate(need, first, request if has_req else None, cap, outcome, max_attempts, need_is_lower_bound=censored)
    if censored and request is not None and request > 0 and ch.allocations[-1] >= request:
        return ch.killed - request
    return ch.killed


def extra_consumption_many(first, need, request, censored, resource: str = "time", max_attempts: int = 3) -> np.ndarray:
    """Vectorised ``extra_consumption`` (NaN request: none)."""
    first = np.asarray(first, float)
    need = np.asarray(need, float)
    req = np.broadcast_to(np.asarray(request, float), first.shape)
    cens = np.broadcast_to(np.asarray(censored, bool), first.shape)
    has_req = np.isfinite(req) & (req > 0)
    short = np.where(cens, first <= need, first < need)
    out = np.zeros(first.shape)
    if not short.any():
        return out
    i = np.flatnonzero(short)
    outcome = Outcome.TIMEOUT if resource == "time" else Outcome.OOM
    cap = np.where(cens[i] & has_req[i], req[i], np.nan)
    k, _, last, _ = simulate_many(
        need[i], first[i], np.where(has_req[i], req[i], np.nan), cap, outcome, max_attempts, cens[i]
    )
    out[i] = np.where(cens[i] & has_req[i] & (last >= np.where(has_req[i], req[i], np.inf)), k - req[i], k)
    return out
