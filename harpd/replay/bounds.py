"""Reference allocations that say how much any predictor could save on a trace.

A replay figure alone cannot tell "harp is weak" from "the trace holds no
more information": if users of a cluster already ask about right, or their
runs of one script vary widely, no model can cut their requests much without
killing jobs.  These rules bound that from both sides, on the replay's own
arrays and metric (``harpd.replay.metric.evaluate``):

* ``clairvoyant-q90`` / ``clairvoyant-q95``: each template (same user, same
  request, same cores: the History's "r" group) gets the 90th / 95th
  percentile of what *all* its jobs used, future included.  No deployable
  model knows this; it is the best one fixed allocation per template can do.
* ``clairvoyant-local``: the most the template's five runs before and five
  after used (the job itself excluded), times 1.1: what knowing the
  neighbouring runs, future ones included, would give.
* ``causal-max5``: the most the template's last five *finished* runs used,
  times 1.1 — the simplest deployable history rule (ALEA-like), for contrast.

Under soft limits (``soft_allocations``) the same rules give the limit a job
*starts* with, and harpd extends it up to the request; there a lower
per-template quantile can pay (a miss is an extension, not a kill), so the
clairvoyant q50 and q75 join, and the history rule is also given at the
job's start (``causal-max5-start``: the runs finished by then).

Each leaves a request alone when its bound is 90% of it or more, and never
allocates below one minute; censored runs (killed at their limit) count as
needing more than their request.  Only for traces with requests.
"""

from __future__ import annotations

from collections import defaultdict, deque
from typing import TYPE_CHECKING

import numpy as np

from harpd.predict.allocation import MARGIN

if TYPE_CHECKING:
    from harpd.replay.dataset import Prepared

KEEP_AT = 0.9  # bound/request at or above which the request stands
NEIGHBOURS = 5
MIN_RUNS = 5  # template size below which the clairvoyant rules keep the request
FLOOR_S = 60.0

RULES = ("clairvoyant-q90", "clairvoyant-q95", "clairvoyant-local", "causal-max5")


def _ratio(prep: Prepared) -> np.ndarray:
    """need/request per job; inf for censored jobs (they needed more than they got)."""
    return np.where(prep.censored, np.inf, prep.need / prep.request)


def _templates(prep: Prepared) -> dict[str, np.ndarray]:
    if prep.template is None:
        raise ValueError("bounds need the template keys: prepare(..., keep_templates=True)")
    groups: dict[str, list[int]] = defaultdict(list)
    for i, t in enumerate(prep.template):
        groups[t].append(i)
    return {t: np.asarray(ix) for t, ix in groups.items()}


def _allocate(prep: Prepared, bound: np.ndarray) -> np.ndarray:
    """Allocation from a bound on need/request: NaN (the request stands) when close to it."""
    cut = np.isfinite(bound) & (bound < KEEP_AT)
    return np.where(cut, np.maximum(bound * prep.request, FLOOR_S), np.nan)


def clairvoyant_quantile(prep: Prepared, q: float) -> np.ndarray:
    rel = _ratio(prep)
    bound = np.full(prep.n, np.inf)
    for ix in _templates(prep).values():
        if len(ix) >= MIN_RUNS:
            bound[ix] = np.quantile(rel[ix], q, method="higher")
    return _allocate(prep, bound)


def clairvoyant_local(prep: Prepared, k: int = NEIGHBOURS) -> np.ndarray:
    rel = _ratio(prep)
    bound = np.full(prep.n, np.inf)
    for ix in _templates(prep).values():
        if len(ix) < 3:
            continue
        r = rel[ix]
        for p in range(len(ix)):
            nb = np.concatenate([r[max(0, p - k) : p], r[p + 1 : p + 1 + k]])
            bound[ix[p]] = nb.max() * MARGIN
    return _allocate(prep, bound)


def causal_max(prep: Prepared, k: int = NEIGHBOURS) -> np.ndarray:
    """Only runs that had finished when the job was submitted (``known_at``)."""
    rel = _ratio(prep)
    tmpl = prep.template
    if tmpl is None:
        raise ValueError("bounds need the template keys: prepare(..., keep_templates=True)")
    last: dict[str, deque[float]] = {}
    bound = np.full(prep.n, np.inf)
    done = 0
    for i in range(prep.n):
        for j in prep.finish_seq[done : prep.known_at[i]]:
            d = last.get(tmpl[j])
            if d is None:
                d = last[tmpl[j]] = deque(maxlen=k)
            d.append(rel[j])
        done = int(prep.known_at[i])
        d = last.get(tmpl[i])
        if d is not None and len(d) >= min(k, 3):
            bound[i] = max(d) * MARGIN
    return _allocate(prep, bound)


def causal_max_at_start(prep: Prepared, k: int = NEIGHBOURS) -> np.ndarray:
    """``causal_max`` decided at the job's start (the runs that had finished by then)."""
    from harpd.replay.soft_walk import recent_at

    assert prep.start is not None  # asked only of a trace with start times
    count, mx = recent_at(prep, prep.start, k)
    return _allocate(prep, np.where(count >= min(k, 3), mx * MARGIN, np.inf))


def soft_allocations(prep: Prepared) -> dict[str, np.ndarray]:
    """Reference start limits under soft limits (NaN: request kept), by rule name."""
    if not prep.has_requests:
        return {}
    return {
        "clairvoyant-q50": clairvoyant_quantile(prep, 0.50),
        "clairvoyant-q75": clairvoyant_quantile(prep, 0.75),
        **allocations(prep),
        "causal-max5-start": causal_max_at_start(prep),
    }


def allocations(prep: Prepared) -> dict[str, np.ndarray]:
    """Every rule's allocations (NaN: request kept), by rule name."""
    if not prep.has_requests:
        return {}
    return {
        "clairvoyant-q90": clairvoyant_quantile(prep, 0.90),
        "clairvoyant-q95": clairvoyant_quantile(prep, 0.95),
        "clairvoyant-local": clairvoyant_local(prep),
        "causal-max5": causal_max(prep),
    }
