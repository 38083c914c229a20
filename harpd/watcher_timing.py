"""When harpd's watcher extends a soft-limited job: one pure rule for harpd and its replay.

Both the live soft policy (``harpd.predict.soft``) and the queue simulation
(``harpd.simulate``) need it; it sits at the bottom layer so that neither the
live path imports the simulator nor the simulator imports the live path.
"""

from __future__ import annotations

import math

import numpy as np


def watcher_look(t: float, lead_s: float, look_s: float, limit_at: float) -> float:
    """When harpd's watcher extends a job whose limit runs out at ``limit_at``: its first look after
    ``limit_at - lead_s`` strictly later than ``t`` (looks at whole multiples of ``look_s``), and never
    after ``limit_at`` (a watcher that looks too rarely for its lead is modelled as extending at the limit)."""
    x = max(limit_at - lead_s, t)
    at = (math.floor(x / look_s) + 1.0) * look_s if look_s > 0 else x
    return min(at, limit_at)


def watcher_looks(t, lead_s: float, look_s: float, limit_at):
    """``watcher_look`` for arrays of jobs (numpy): the replay's metric counts the extensions the
    same watcher makes.  ``tests/unit/predict/test_soft_policy.py`` checks the two agree."""
    limit_at = np.asarray(limit_at, float)
    x = np.maximum(limit_at - lead_s, np.asarray(t, float))
    at = (np.floor(x / look_s) + 1.0) * look_s if look_s > 0 else x
    return np.minimum(at, limit_at)
