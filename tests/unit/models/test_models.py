"""Baselines, the GBM quantile model, conformal calibration, registry, persistence."""

from __future__ import annotations

import math

import numpy as np
import pytest

from harpd.features.history import COL, FEATURE_NAMES, N_FEATURES
from harpd.models import registry
from harpd.models.base import float32_row, predict_row
from harpd.models.baselines import Alea, Tsafrir, UserRequest
from harpd.models.conformal import Calibrator, CalibratorTuning, HarpModel, OnlineConformal
from harpd.models.gbm import FlatTrees, GbmQuantile, _compiled_walk
from harpd.models.persistence import ModelFileError, load_model, save_model


def _data(n, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, N_FEATURES)).astype(np.float32)
    # log usage ratio depends on two columns, noise grows with the third
    y = -1.5 + 0.5 * X[:, 0] - 0.3 * X[:, 1] + (0.2 + 0.3 * np.abs(X[:, 2])) * rng.normal(size=n)
    return X, np.minimum(y, 0.0)


def test_baselines_read_their_columns():
    X = np.zeros((3, N_FEATURES), np.float32)
    X[:, COL["u_mean2"]] = [-1.0, -2.0, np.nan]
    X[:, COL["u_rmax5"]] = [-0.5, -0.1, -0.2]
    assert np.allclose(Tsafrir().predict(X)[:2], [-1.0, -2.0]) and np.isnan(Tsafrir().predict(X)[2])
    assert np.allclose(Alea().predict(X), [-0.5, -0.1, -0.2], atol=1e-6)
    assert np.all(UserRequest().fit(X, np.zeros(3)).predict(X) == 0.0)
    assert not Tsafrir.needs_training


def test_gbm_quantile_coverage_on_held_out_rows():
    X, y = _data(6000)
    m = GbmQuantile(quantile=0.9).fit(X[:4000], y[:4000])
    cover = np.mean(y[4000:] <= m.predict(X[4000:]))
    assert 0.82 <= cover <= 0.97


def test_gbm_small_data_and_constant_columns():
    X = np.zeros((20, N_FEATURES), np.float32)  # every column constant
    y = np.linspace(-3, 0, 20)
    m = GbmQuantile(quantile=0.9).fit(X, y)
    assert np.allclose(m.predict(X[:2]), np.quantile(y, 0.9))
    with pytest.raises(RuntimeError):
        GbmQuantile().predict(X)


def test_check_xy_rejects_bad_shapes():
    with pytest.raises(ValueError, match="2-D"):
        GbmQuantile().fit(np.zeros(5), np.zeros(5))
    with pytest.raises(ValueError, match="NaN"):
        GbmQuantile().fit(np.zeros((5, 2)), np.array([0, 1, np.nan, 0, 0]))


def test_split_conformal_offset_is_the_kth_residual():
    c = OnlineConformal(alpha=0.1, window=1000, min_group=1, gamma=0.0)
    res = np.arange(1, 20, dtype=float)  # n = 19 → k = ceil(20 * 0.9) = 18
    c.reset(None, res)
    assert c.offset(None) == 18.0
    c2 = OnlineConformal(alpha=0.01, window=1000, min_group=1, gamma=0.0)
    c2.reset(None, res)
    assert c2.offset(None) == math.inf  # too few residuals to bound at 99%


def test_conformal_coverage_exchangeable():
    rng = np.random.default_rng(3)
    misses = []
    for _ in range(200):
        r = rng.normal(size=201)
        c = OnlineConformal(alpha=0.1, window=1000, min_group=1, gamma=0.0)
        c.reset(None, r[:200])
        misses.append(r[200] > c.offset(None))
    assert np.mean(misses) <= 0.16  # P(miss) <= alpha, with sampling slack


def test_groups_fall_back_to_parent_then_all():
    c = OnlineConformal(alpha=0.1, window=100, min_group=10, gamma=0.0)
    c.reset(np.array(["p0|a"] * 5 + ["p0|b"] * 20, dtype=object), np.r_[np.full(5, 100.0), np.zeros(20)])
    assert c._key("p0|b") == "p0|b"
    assert c._key("p0|a") == "p0|*"  # 5 < min_group: the bucket pool
    assert c._key("p9|z") == "\x00all"


def test_aci_moves_level_towards_target():
    c = OnlineConformal(alpha=0.1, window=100, min_group=1, gamma=0.05, alpha_max=0.5)
    c.reset(None, np.zeros(50))
    for _ in range(20):
        c.update(None, 0.0, err=True)  # misses → level falls → wider bound
    assert c.level["\x00all"] < 0.1
    for _ in range(200):
        c.update(None, 0.0, err=False)
    assert c.level["\x00all"] == pytest.approx(0.5)


def test_bursts_get_no_head_room():
    c = OnlineConformal(alpha=0.05, window=100, min_group=1, gamma=0.05, alpha_max=0.5)
    c.reset(np.array(["p3|x"] * 50, dtype=object), np.zeros(50))
    for _ in range(100):
        c.update("p3|x", 0.0, err=False)
    assert c.level["p3|x"] <= 0.05 + 1e-12


def test_calibrator_theta_falls_after_costly_kill_and_recovers():
    cal = Calibrator(alpha=0.05, tuning=CalibratorTuning(budget=0.03, eta=0.05))
    cal.seed(None, np.full(200, -1.0), np.full(200, -2.0), np.zeros(200, bool), np.ones(200))
    t0 = cal.theta
    cal.feedback(None, -1.0, -0.5, first=100.0, need=900.0, request=1000.0, censored=False)
    assert cal.theta < t0
    t1 = cal.theta
    for _ in range(500):
        cal.feedback(None, -1.0, -2.0, first=1000.0, need=300.0, request=1000.0, censored=False)
    assert cal.theta > t1


def test_harp_model_fit_predict_and_theta():
    X, y = _data(5000)
    m = HarpModel(alpha=0.1, base=GbmQuantile(quantile=0.9, max_iter=30)).fit(
        X, y, censored=np.zeros(len(y), bool), sample_weight=np.ones(len(y))
    )
    up = m.predict(X[-1000:])
    assert up.shape == (1000,) and np.all(np.isfinite(up))
    assert 0 < m.theta <= 0.9
    # calibrated bound covers at least as much as the raw base
    assert np.mean(y[-1000:] <= up) >= np.mean(y[-1000:] <= m.predict_base(X[-1000:])) - 1e-9


def test_registry_builtins_and_entry_points():
    names = registry.available()
    for n in ("request", "tsafrir", "alea", "gbm", "harp"):
        assert n in names
    assert registry.load_class("alea") is Alea
    assert isinstance(registry.create("gbm", quantile=0.8), GbmQuantile)
    with pytest.raises(registry.UnknownPredictor, match="available"):
        registry.load_class("nope")


def test_registry_finds_site_entry_point(monkeypatch):
    from importlib.metadata import EntryPoint

    ep = EntryPoint(name="site", value="harpd.models.baselines:Alea", group=registry.GROUP)
    monkeypatch.setattr(registry, "entry_points", lambda group: [ep] if group == registry.GROUP else [])
    assert registry.load_class("site") is Alea


def test_persistence_round_trip_and_refusals(tmp_path):
    X, y = _data(500)
    m = GbmQuantile(max_iter=10).fit(X, y)
    p = save_model(tmp_path / "m" / "time-gbm.pkl", m, name="gbm", resource="time", relative=True)
    env = load_model(p)
    assert env.name == "gbm" and env.resource == "time" and env.relative is True
    assert env.features == tuple(FEATURE_NAMES) and env.trained_on is None
    assert np.allclose(env.model.predict(X[:5]), m.predict(X[:5]))
    meta = load_model(
        save_model(
            tmp_path / "m" / "b.pkl",
            m,
            name="gbm",
            resource="mem",
            relative=False,
            meta={"n_train": 1234, "trained_at": 5.0},
        )
    )
    assert meta.trained_on == 1234 and meta.trained_at == 5.0 and meta.relative is False
    (tmp_path / "junk.pkl").write_bytes(b"not a pickle")
    with pytest.raises(ModelFileError, match="retrain"):
        load_model(tmp_path / "junk.pkl")
    with pytest.raises(ModelFileError, match="missing"):
        load_model(tmp_path / "none.pkl")
    import pickle

    raw = pickle.loads(p.read_bytes())  # the file holds a plain dict, so older files still load
    raw["features"] = ["old"]
    (tmp_path / "old.pkl").write_bytes(pickle.dumps(raw))
    with pytest.raises(ModelFileError, match="feature layout"):
        load_model(tmp_path / "old.pkl")


def test_flat_trees_match_sklearn_one_row_at_a_time():
    rng = np.random.default_rng(5)
    X = rng.normal(size=(3000, N_FEATURES)).astype(np.float32)
    X[rng.random(X.shape) < 0.15] = np.nan  # missing values take the learned side
    y = np.nan_to_num(X[:, 0]) - np.nan_to_num(X[:, 3]) + rng.normal(size=3000)
    m = GbmQuantile(quantile=0.8, max_iter=40).fit(X, y)
    ref = m.model_.predict(X[:300][:, m.cols_])
    one = np.array([m.predict(X[i : i + 1])[0] for i in range(300)])
    assert np.allclose(ref, one, rtol=0, atol=1e-9)
    import pickle

    assert "fast_" not in m.__getstate__()  # the flat copy is not pickled
    m2 = pickle.loads(pickle.dumps(m))  # but built as the model loads, before any request needs it
    assert isinstance(m2.__dict__.get("fast_"), FlatTrees) and m2.predict(X[:1])[0] == ref[0]


def test_one_row_in_plain_python_is_sklearns_prediction_to_the_bit():
    """The live path's walk (the trees written as Python) adds the leaves in scikit-learn's order."""
    rng = np.random.default_rng(6)
    X = rng.normal(size=(3000, N_FEATURES)).astype(np.float32)
    X[rng.random(X.shape) < 0.15] = np.nan  # missing values take the learned side, left or right
    y = np.nan_to_num(X[:, 0]) - np.nan_to_num(X[:, 3]) + rng.normal(size=3000)
    m = GbmQuantile(quantile=0.8, max_iter=40).fit(X, y)
    ref = m.model_.predict(X[:400][:, m.cols_])
    rows = [float32_row(x) for x in X[:400].astype(float)]
    got = [m.predict_row(r) for r in rows]
    assert got == ref.tolist()  # exactly: the same comparisons, the same additions in the same order
    sides = m.fast_.missing_left[~m.fast_.leaf]
    assert sides.any() and not sides.all()  # both sides of a missing value were exercised


def test_a_tree_that_cannot_be_written_as_python_is_walked_by_numpy():
    rng = np.random.default_rng(7)
    X = rng.normal(size=(500, N_FEATURES)).astype(np.float32)
    m = GbmQuantile(quantile=0.8, max_iter=5).fit(X, X[:, 0].astype(float))
    want = m.predict(X[:3])
    m.fast_ = FlatTrees(m.model_, m.cols_)
    m.fast_.value[0] = np.inf  # the numpy walk holds the same arrays
    assert _compiled_walk(m.fast_) is None
    m.fast_._walk = None
    m.fast_.value[0] = m.model_._predictors[0][0].nodes["value"][0]
    assert [m.predict_row(float32_row(x)) for x in X[:3].astype(float)] == pytest.approx(want, abs=1e-12)


def test_harp_model_one_row_equals_its_matrix_prediction():
    """``predict_row`` (the live path) and ``predict`` (the replay) give one job the same bound."""
    X, y = _data(4000)
    rng = np.random.default_rng(8)
    hist = [COL[c] for c in ("r_n", "s_n", "r_max", "s_max", "r_q90", "s_q90")]
    X[:, hist] = np.where(rng.random((len(X), len(hist))) < 0.3, np.nan, rng.uniform(-3, 3, (len(X), len(hist))))
    X[:, [COL["r_n"], COL["s_n"]]] = np.abs(X[:, [COL["r_n"], COL["s_n"]]])  # log1p of run counts, some >= 10 runs
    m = HarpModel(alpha=0.1, base=GbmQuantile(quantile=0.9, max_iter=30)).fit(
        X, y, censored=np.zeros(len(y), bool), sample_weight=np.ones(len(y))
    )
    groups = np.array([f"p{i % 3}|x" for i in range(400)], dtype=object)
    want = m.predict(X[-400:], groups=groups)
    got = [predict_row(m, float32_row(x), g) for x, g in zip(X[-400:].astype(float), groups, strict=True)]
    assert got == pytest.approx(want.tolist(), rel=0, abs=1e-12)
    assert any(f > -np.inf for f in m.floor_of(X[-400:]))  # the history floor took part
    assert np.sum(want == m.floor_of(X[-400:])) > 0  # and decided some bounds
