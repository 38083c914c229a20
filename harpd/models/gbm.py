"""Gradient boosting under the pinball (quantile) loss on log usage.

Pinball loss at quantile τ costs an under-prediction τ/(1-τ) times an
over-prediction of the same size, which is the asymmetry of the problem (a
killed job costs far more than a few idle minutes).  Log scale because usage
spans six orders of magnitude and errors matter relatively.  Censored rows
(killed at their limit) carry their lower bound: with the request as the
reference their target is ≥ 0 and every allocation harp may choose is ≤ 0,
so the pinball gradient of a censored row is exactly that of its unknown true
value.
"""

from __future__ import annotations

import numpy as np
from sklearn.ensemble import HistGradientBoostingRegressor

from harpd.models.base import BasePredictor, check_xy


class GbmQuantile(BasePredictor):
    name = "gbm"
    needs_training = True

    def __init__(self, quantile: float = 0.9, max_iter: int = 100, learning_rate: float = 0.12,
                 max_leaf_nodes: int = 15, min_samples_leaf: int = 40, l2_regularization: float = 1.0,
                 max_train: int = 250_000, random_state: int = 0, weighted: bool = False):
        self.quantile = quantile
        self.max_iter = max_iter
        self.learning_rate = learning_rate
        self.max_leaf_nodes = max_leaf_nodes
        self.min_samples_leaf = min_samples_leaf
        self.l2_regularization = l2_regularization
        self.max_train = max_train
        self.random_state = random_state
        self.weighted = weighted  # weigh rows by size (request × cores) in the loss
        self.model_: HistGradientBoostingRegressor | None = None
        self.const_: float | None = None
        self.cols_: np.ndarray | None = None

    def fit(self, X, y, *, censored=None, groups=None, sample_weight=None):
        X, y = check_xy(X, y)
        sw = None
        if self.weighted and sample_weight is not None:
            sw = np.asarray(sample_weight, float)
            sw = sw / np.mean(sw)
        if self.max_train and X.shape[0] > self.max_train:  # most recent rows: drift
            X, y = X[-self.max_train:], y[-self.max_train:]
            sw = None if sw is None else sw[-self.max_train:]
        if X.shape[0] < 2 * self.min_samples_leaf:
            # too little to grow a tree: the empirical quantile is the honest answer
            self.const_ = float(np.quantile(y, self.quantile)) if len(y) else 0.0
            self.model_ = None
            return self
        # columns without two distinct values carry nothing (and trip sklearn's binner)
        cols = []
        for c in range(X.shape[1]):
            v = X[:, c]
            v = v[~np.isnan(v)]
            if v.size and v.min() != v.max():
                cols.append(c)
        self.cols_ = np.array(cols, dtype=np.intp)
        if not cols:
            self.const_ = float(np.quantile(y, self.quantile))
            self.model_ = None
            return self
        X = X[:, self.cols_]
        if sw is not None:
            sw = np.sqrt(sw)  # full size weights let a few huge jobs dominate
        self.model_ = HistGradientBoostingRegressor(
            loss="quantile", quantile=self.quantile, max_iter=self.max_iter,
            learning_rate=self.learning_rate, max_leaf_nodes=self.max_leaf_nodes,
            min_samples_leaf=self.min_samples_leaf, l2_regularization=self.l2_regularization,
            early_stopping=False, random_state=self.random_state,
        ).fit(X, y, sample_weight=sw)
        self.const_ = None
        return self

    def predict(self, X, groups=None):
        X, _ = check_xy(X)
        if self.model_ is None:
            if self.const_ is None:
                raise RuntimeError("GbmQuantile.predict called before fit")
            return np.full(X.shape[0], self.const_)
        return self.model_.predict(X[:, self.cols_])
