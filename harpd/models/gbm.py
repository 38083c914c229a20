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

import math
from collections.abc import Callable, Sequence
from typing import Any

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
        if X.shape[0] <= 4:  # a job or a few: scikit-learn's per-call cost is not worth it
            return np.array([self._trees().predict_row(row) for row in X.tolist()])
        return self.model_.predict(X[:, self.cols_])

    def _trees(self) -> FlatTrees:
        fast = getattr(self, "fast_", None)
        if fast is None:
            assert self.cols_ is not None, "the model is fitted before its trees are walked"
            fast = self.fast_ = FlatTrees(self.model_, self.cols_)
        return fast

    def predict_row(self, row: Sequence[float], group: str | None = None) -> float:
        """One job's base prediction in plain Python (``row``: float32-rounded, as ``check_xy`` makes it;
        ``group`` is not used, as in ``predict``).

        The live path predicts one job per request, and once the CPU's caches
        and branch predictors have gone cold between requests (as they do at
        a cluster's submission rates) the numpy walk costs 0.41 ms, the
        trees written as Python 0.15 ms (``FlatTrees.predict_row``).  The
        same numbers as ``predict`` (tests/unit/models checks it).
        """
        if self.model_ is None:
            if self.const_ is None:
                raise RuntimeError("GbmQuantile.predict called before fit")
            return float(self.const_)
        return self._trees().predict_row(row)

    def __getstate__(self):
        d = dict(self.__dict__)
        d.pop("fast_", None)  # rebuilt when loaded
        return d

    def __setstate__(self, state):
        """Load, and write the trees as Python now (tens of ms): harpd loads a model before it
        answers with it, so no sbatch waits for that; a model it cannot walk so is left to ``predict``."""
        self.__dict__.update(state)
        if getattr(self, "model_", None) is not None:
            try:
                self._trees()
            except Exception:  # the first prediction tries again and says what is wrong
                self.__dict__.pop("fast_", None)


class FlatTrees:
    """All trees of a fitted HistGradientBoostingRegressor, for one row at a time.

    scikit-learn predicts one row in about a millisecond (per-tree calls and
    an OpenMP region each); harp predicts one job per sbatch.  The trees
    written as one Python function (``predict_row``) cost tens of
    microseconds and give scikit-learn's numbers to the bit; where they
    cannot be written so, the flat arrays are walked with numpy
    (``predict_one``; tests/unit/models checks both against ``predict``).
    Both read the whole feature row: ``cols``, the columns the model was
    fitted on, maps each node's feature to its place in the row.
    """

    def __init__(self, model, cols: np.ndarray) -> None:
        nodes = [p[0].nodes for p in model._predictors]
        sizes = np.array([len(n) for n in nodes])
        offs = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        allnodes = np.concatenate(nodes)
        self.value = allnodes["value"].astype(np.float64)
        self.feature = np.asarray(cols, dtype=np.intp)[allnodes["feature_idx"].astype(np.intp)]
        self.threshold = allnodes["num_threshold"].astype(np.float64)
        self.missing_left = allnodes["missing_go_to_left"].astype(bool)
        tree_of = np.repeat(np.arange(len(nodes)), sizes)
        self.left = allnodes["left"].astype(np.intp) + offs[tree_of]
        self.right = allnodes["right"].astype(np.intp) + offs[tree_of]
        self.leaf = allnodes["is_leaf"].astype(bool)
        self.roots = offs.astype(np.intp)
        self.baseline = float(np.ravel(model._baseline_prediction)[0])
        self._walk = _compiled_walk(self)  # None: a tree harp cannot write as Python; numpy walks it

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

    def predict_row(self, x: Sequence[float]) -> float:
        """``predict_one`` for a row of Python floats, by the trees written as Python (``_compiled_walk``).

        Each tree adds its leaf in turn from the baseline, the order
        scikit-learn's own ``predict`` adds them in, so this is
        ``model.predict`` to the bit (``predict_one``'s numpy sum groups
        them differently, within 1e-15).
        """
        if self._walk is None:
            return self.predict_one(np.asarray(x, dtype=np.float64))
        return float(self._walk(x))


#: deeper trees are walked by numpy (Python's parser nests at most 100 blocks)
_MAX_DEPTH = 60


def _compiled_walk(trees: FlatTrees) -> Callable[[Sequence[float]], float] | None:
    """All trees as one Python function of the feature row: nested ``if``s on literal thresholds.

    Why: harpd predicts one job per sbatch, and at a cluster's submission
    rates the CPU's caches and branch predictors have gone cold between
    two requests.  Walking node tuples in a loop then costs 0.34 ms for 100
    trees, the same walk as straight-line code 0.15 ms (0.05 and 0.02 ms
    warm).  The source holds nothing but numbers read from the fitted trees
    (``int()`` and ``float()`` of scikit-learn's node arrays, written with
    ``repr``), so compiling it runs no input of anyone's; a tree with a
    non-finite number, or deeper than ``_MAX_DEPTH``, gives None.

    A missing value (NaN) fails every comparison, so a node that sends
    missing values left tests ``not x > threshold`` and one that sends them
    right ``x <= threshold``: the sides scikit-learn takes.
    """
    leaf = trees.leaf.tolist()
    feature = trees.feature.tolist()
    threshold = trees.threshold.tolist()
    missing_left = trees.missing_left.tolist()
    left, right, value = trees.left.tolist(), trees.right.tolist(), trees.value.tolist()
    if not all(math.isfinite(v) for v in value) or not math.isfinite(trees.baseline):
        return None
    lines = ["def walk(x):", f"    t = {float(trees.baseline)!r}"]
    todo: list[tuple[int, int] | str] = [(int(r), 1) for r in reversed(trees.roots.tolist())]
    while todo:  # depth first, the "if" side before the "else" side
        item = todo.pop()
        if isinstance(item, str):
            lines.append(item)
            continue
        n, depth = item
        pad = "    " * depth
        if leaf[n]:
            lines.append(f"{pad}t += {float(value[n])!r}")
            continue
        t = float(threshold[n])
        if depth > _MAX_DEPTH or not math.isfinite(t):
            return None
        x = f"x[{int(feature[n])}]"
        lines.append(f"{pad}if not {x} > {t!r}:" if missing_left[n] else f"{pad}if {x} <= {t!r}:")
        todo += [(int(right[n]), depth + 1), f"{pad}else:", (int(left[n]), depth + 1)]
    lines.append("    return t")
    scope: dict[str, Any] = {"__builtins__": {}}
    exec(compile("\n".join(lines), "<harp trees>", "exec"), scope)  # numbers only: see the docstring
    return scope["walk"]
