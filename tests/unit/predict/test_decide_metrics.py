"""Guard rails (scalar and vectorised agree) and the metric's bookkeeping."""

from __future__ import annotations

import math

import numpy as np
import pytest

from harpd.features.resources import gpu_count as _gpu_count
from harpd.models.cost import extra_consumption, extra_consumption_many
from harpd.predict.allocation import Guard, allocate
from harpd.replay.metric import Jobs, evaluate

G = Guard(min_history=5, floor=60.0, leave_alone_ratio=0.9, min_fraction=0.0)


def test_cold_start_keeps_request():
    v, why = allocate(3600, math.log(0.2), 4, None, G)
    assert v is None and "cold start" in why


def test_shrink_floor_limit_and_leave_alone():
    assert allocate(3600, math.log(0.5), 10, None, G)[0] == pytest.approx(1800)
    assert allocate(3600, math.log(0.001), 10, None, G)[0] == 60.0  # floor
    assert allocate(3600, math.log(0.5), 10, 1000, G)[0] == 1000  # partition limit
    v, why = allocate(3600, math.log(0.95), 10, None, G)
    assert v is None and "kept" in why
    assert allocate(3600, math.log(0.5), 10, None, G, leave_alone_ratio=0.4)[0] is None  # model's θ
    assert allocate(3600, math.inf, 10, None, G)[0] is None
    assert allocate(30, math.log(0.5), 10, None, G)[0] is None  # floor above the request


def test_never_below_what_escalation_can_walk_back():
    g = Guard(min_fraction=0.25)  # 3 attempts: x, 2x, 4x ≥ request
    assert allocate(3600, math.log(0.01), 10, None, g)[0] == pytest.approx(900)
    assert Guard.from_settings(_P(), "time", max_attempts=4).min_fraction == pytest.approx(0.125)
    assert Guard.from_settings(_P(), "mem").floor == 100


class _P:
    min_history, floor_time_s, floor_mem_mb, allow_shrink, max_raise_factor = 5, 60, 100, True, 1.0
    leave_alone_ratio = 0.9


def test_raise_only_when_allowed():
    assert allocate(3600, math.log(2.0), 10, None, G)[0] is None
    g = Guard(max_raise_factor=1.5)
    assert allocate(3600, math.log(2.0), 10, None, g)[0] == pytest.approx(5400)
    assert allocate(3600, math.log(0.5), 10, None, Guard(allow_shrink=False))[0] is None


def test_absolute_without_request():
    assert allocate(None, math.log(2000.0), 10, None, Guard(floor=100.0))[0] == pytest.approx(2000)
    assert allocate(None, math.log(20.0), 10, 1000.0, Guard(floor=100.0))[0] == 100.0


def test_gpu_count():
    assert _gpu_count("2", None) == 2 and _gpu_count("a100:4", None) == 4
    assert _gpu_count(None, "gpu:v100:2") == 2 and _gpu_count(None, "shard:3") is None


def _ev(alloc, need, req, cens, w=None, **kw):
    n = len(need)
    return evaluate(
        "m",
        np.array(alloc, float),
        Jobs(
            np.array(need, float),
            np.array(req, float),
            np.array(cens, bool),
            np.ones(n) if w is None else np.array(w, float),
        ),
        **kw,
    )


def test_metrics_by_hand():
    # job 0 fits a shrink; job 1 runs out at 100 (needs 150): 100 killed, then min(200, 1000)
    # job 2 left alone; job 3 censored (killed at its request 500) left alone
    base = _ev([np.nan] * 4, [50, 150, 300, 500], [1000, 1000, 1000, 500], [0, 0, 0, 1])
    m = _ev([100, 100, np.nan, np.nan], [50, 150, 300, 500], [1000, 1000, 1000, 500], [0, 0, 0, 1], baseline=base)
    used = 50 + 150 + 300 + 500
    assert base.consumed_over_used == pytest.approx(1.0)
    assert base.over_reservation == pytest.approx(950 + 850 + 700 + 0)
    assert m.under_rate == pytest.approx(1 / 3) and m.under_jobs == 1 and m.lost == 0
    assert m.over_reservation == pytest.approx(50 + (200 - 150) + 700)
    assert m.killed == pytest.approx(100 + 500)  # harp's kill + the censored job's own
    assert m.consumed_over_used == pytest.approx((used + 100) / used)
    assert m.consumed_vs_request == pytest.approx((used + 100) / used)
    assert m.over_vs_request == pytest.approx(800 / 2500)
    assert m.reserved_over_used == pytest.approx((100 + 200 + 1000 + 500) / used)
    assert m.changed == pytest.approx(0.5)


def test_censored_shrink_costs_its_attempts_below_the_request():
    base = _ev([np.nan], [1000], [1000], [1])
    m = _ev([300], [1000], [1000], [1], baseline=base)
    # 300 killed, 600 killed, 1000 killed (as in the trace): 900 extra
    assert m.consumed_vs_request == pytest.approx(1900 / 1000)
    assert m.under_rate == 0.0  # censored jobs are not "would have fit"
    assert extra_consumption(300, 1000, 1000, True) == pytest.approx(900)


def test_lost_job_counts_and_is_resubmitted_by_hand():
    m = _ev([10], [1000], [1000], [0], max_attempts=3)  # 10, 20, 40: never reaches 1000
    assert m.lost == 1 and m.killed == pytest.approx(70)
    assert m.consumed_over_used == pytest.approx((70 + 1000) / 1000)


def test_weights_are_cores():
    m = _ev([np.nan, np.nan], [100, 100], [200, 200], [0, 0], w=[1, 10])
    assert m.over_reservation == pytest.approx(100 + 1000) and m.over_reservation_jobs == pytest.approx(200)


def test_score_ranks_frequent_under_prediction_below_modest_over_allocation():
    rng = np.random.default_rng(0)
    need = rng.uniform(100, 1000, 2000)
    req = need * 3
    modest = need * 1.3  # over-allocates modestly, never runs out
    eager = need * np.where(rng.random(2000) < 0.3, 0.7, 1.05)  # 30% run out
    base = _ev([np.nan] * 2000, need, req, [0] * 2000)
    a = _ev(modest, need, req, [0] * 2000, baseline=base)
    b = _ev(eager, need, req, [0] * 2000, baseline=base)
    assert b.over_reservation < a.over_reservation  # the eager one reserves less...
    assert a.score < b.score  # ...but scores worse


def test_extra_consumption_vectorised_matches():
    rng = np.random.default_rng(1)
    n = 500
    R = rng.uniform(100, 5000, n)
    U = R * rng.uniform(0, 1.2, n)
    c = U >= R
    A = R * rng.uniform(0.05, 1.0, n)
    v = extra_consumption_many(A, U, R, c)
    s = [extra_consumption(float(a), float(u), float(r), bool(x)) for a, u, r, x in zip(A, U, R, c)]
    assert np.allclose(v, s)
