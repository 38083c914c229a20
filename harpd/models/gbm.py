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

    def __init__(
        self,
        quantile: float = 0.9,
        max_iter: int = 100,
        learning_rate: float = 0.12,
        max_leaf_nodes: int = 15,
        min_samples_leaf: int = 40,
        l2_regularization: float = 1.0,
        max_train: int = 250_000,
        random_state: int = 0,
        weighted: bool = False,
    ):
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
            X, y = X[-self.max_train :], y[-self.max_train :]
            sw = None if sw is None else sw[-self.max_train :]
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
            loss="quantile",
            quantile=self.quantile,
            max_iter=self.max_iter,
            learning_rate=self.learning_rate,
            max_leaf_nodes=self.max_leaf_nodes,
            min_samples_leaf=self.min_samples_leaf,
            l2_regularization=self.l2_regularization,
            early_stopping=False,
            random_state=self.random_state,
        ).fit(X, y, sample_weight=sw)
        self.const_ = None
        return self

    def predict(self, X, groups=None):
        X, _ = check_xy(X)
        if self.model_ is None:
            if self.const_ is None:
                raise RuntimeError("GbmQuantile.predict called before fit")
            return np.full(X.shape[0], self.const_)
        Xc = X[:, self.cols_]
        if X.shape[0] <= 4:  # the live path: one job at a time
            fast = getattr(self, "fast_", None)
            if fast is None:
                fast = self.fast_ = FlatTrees(self.model_)
            return np.array([fast.predict_one(row) for row in Xc])
        return self.model_.predict(Xc)

    def __getstate__(self):
        d = dict(self.__dict__)
        d.pop("fast_", None)  # rebuilt on first use
        return d


class FlatTrees:
    """All trees of a fitted HistGradientBoostingRegressor as flat arrays.

    scikit-learn predicts one row in about a millisecond (per-tree calls and
    an OpenMP region each); harp predicts one job per sbatch.  Walking all
    trees at once with numpy indexing costs tens of microseconds and gives
    the same numbers (tests/unit/models checks it against ``predict``).
    """

    def __init__(self, model) -> None:
        nodes = [p[0].nodes for p in model._predictors]
        sizes = np.array([len(n) for n in nodes])
        offs = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        allnodes = np.concatenate(nodes)
        self.value = allnodes["value"].astype(np.float64)
        self.feature = allnodes["feature_idx"].astype(np.intp)
        self.threshold = allnodes["num_threshold"].astype(np.float64)
        self.missing_left = allnodes["missing_go_to_left"].astype(bool)
        tree_of = np.repeat(np.arange(len(nodes)), sizes)
        self.left = allnodes["left"].astype(np.intp) + offs[tree_of]
        self.right = allnodes["right"].astype(np.intp) + offs[tree_of]
        self.leaf = allnodes["is_leaf"].astype(bool)
        self.roots = offs.astype(np.intp)
        self.baseline = float(np.ravel(model._baseline_prediction)[0])

    def predict_one(self, x: np.ndarray) -> float:
        x = np.asarray(x, dtype=np.float64)
        cur = self.roots
        leaf = self.leaf
        while True:
            at_leaf = leaf[cur]
            if at_leaf.all():
                break
            v = x[self.feature[cur]]
            go_left = np.where(np.isnan(v), self.missing_left[cur], v <= self.threshold[cur])
            cur = np.where(at_leaf, cur, np.where(go_left, self.left[cur], self.right[cur]))
        return self.baseline + float(self.value[cur].sum())
