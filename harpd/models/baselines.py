"""History baselines from the literature: no training, one history column each.

They are the yardsticks a learned model must beat, and the fallback a site
can choose when it wants something it can explain in one sentence.
"""

from __future__ import annotations

import numpy as np

from harpd.features.history import COL
from harpd.models.base import BasePredictor, check_xy


class UserRequest(BasePredictor):
    """The user's own request: predicts "exactly what was asked" (log ratio 0)."""

    name = "request"
    needs_training = False

    def fit(self, X, y, *, censored=None, groups=None, sample_weight=None):
        return self

    def predict(self, X, groups=None):
        X, _ = check_xy(X)
        return np.zeros(X.shape[0])


class _Column(BasePredictor):
    needs_training = False
    column = ""

    def fit(self, X, y, *, censored=None, groups=None, sample_weight=None):
        return self

    def predict(self, X, groups=None):
        X, _ = check_xy(X)
        return X[:, COL[self.column]].astype(np.float64)


class Tsafrir(_Column):
    """Tsafrir, Etsion & Feitelson (TPDS 2007): the mean of the user's last two run times."""

    name = "tsafrir"
    column = "u_mean2"


class Alea(_Column):
    """ALEA (Klusáček): max used/requested ratio of the user's last five runs, times the request."""

    name = "alea"
    column = "u_rmax5"
