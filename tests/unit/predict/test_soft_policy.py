"""The soft policy's parts beyond the template's history: running siblings, tilts, the budget controller."""

from __future__ import annotations

import math

import numpy as np
import pytest
from replay_helpers import rec as _rec

from harpd.config import HarpSettings
from harpd.predict.allocation import Guard
from harpd.predict.soft import BudgetController, SoftPolicy, StakeMean, running_bound, stake_of, tilt
from harpd.predict.soft_state import SCALE_KEY, SoftState
from harpd.replay.dataset import prepare
from harpd.replay.soft_walk import hold_budget, running_at, soft_starts
from harpd.store import Store


def _brute_running(p):
    count = np.zeros(p.n, np.int64)
    longest = np.zeros(p.n)
    for i in range(p.n):
        sib = [
            j
            for j in range(p.n)
            if j != i and p.template[j] == p.template[i] and (p.start[j], j) < (p.start[i], i) and p.end[j] > p.start[i]
        ]
        count[i] = len(sib)
        longest[i] = max((p.start[i] - p.start[j] for j in sib), default=0.0)
    return count, longest


def test_running_at_matches_a_brute_force_count():
    rng = np.random.default_rng(3)
    recs = [
        _rec(i, float(rng.integers(0, 5000)), float(rng.integers(1, 3000)), 4000.0, user=f"u{rng.integers(0, 3)}")
        for i in range(150)
    ]
    p = prepare(recs, "time", keep_templates=True)
    count, longest = running_at(p)
    want_c, want_l = _brute_running(p)
    assert count.tolist() == want_c.tolist()
    assert longest == pytest.approx(want_l)
    assert count.max() > 3  # the case is not trivial


def test_a_running_sibling_is_a_lower_bound():
    pol = SoftPolicy(recent_margin=1.1)
    up = np.log(np.array([100 / 4000, 100 / 4000, 100 / 4000]))
    got = running_bound(up, np.array([0.0, 50.0, 1000.0]), np.array([4000.0] * 3), pol)
    # none running, one shorter than the bound: unchanged; one that ran 1000 s: 1.1 × 1000
    assert np.exp(got) * 4000 == pytest.approx([100.0, 100.0, 1100.0])


def test_one_jobs_numbers_give_what_the_arrays_give():
    """harpd passes one job's floats (plain Python), the replay arrays (numpy): the same values."""
    pol = SoftPolicy(recent_margin=1.1)
    inf, nan = math.inf, math.nan
    cases = [
        (math.log(0.1), 1000.0, 4000.0),
        (math.log(0.1), 50.0, 4000.0),
        (math.log(0.1), 0.0, 4000.0),  # none running
        (math.log(0.1), nan, 4000.0),
        (math.log(0.1), inf, 4000.0),
        (math.log(0.1), 100.0, 0.0),  # no request
        (math.log(0.1), -5.0, 4000.0),
        (nan, 1000.0, 4000.0),  # no model bound: a running sibling still gives one
        (-inf, 1000.0, 4000.0),
        (inf, 1000.0, 4000.0),
    ]
    up, elapsed, req = (np.array(c, float) for c in zip(*cases, strict=True))
    arrays = running_bound(up, elapsed, req, pol)
    for (u, e, r), want in zip(cases, arrays, strict=True):
        got = running_bound(u, e, r, pol)
        assert isinstance(got, float)
        assert got == pytest.approx(want, nan_ok=True)
    cores = np.array([4.0, 1.0, 0.0, nan, 2.0])
    reqs = np.array([3600.0, 0.5, 100.0, 100.0, inf])
    for c, r, want in zip(cores, reqs, stake_of(cores, reqs), strict=True):
        assert stake_of(float(c), float(r)) == pytest.approx(want, nan_ok=True)
    assert tilt(SoftPolicy(stake_tilt=0.1), 0, nan, 5.0) == 0.0  # an unknown stake tilts nothing
    assert math.isfinite(tilt(SoftPolicy(stake_tilt=0.1), 0, inf, 5.0))  # clipped, as nan_to_num clips


def test_tilts_point_the_right_way():
    pol = SoftPolicy(burst_tilt=0.2, stake_tilt=0.1)
    assert tilt(pol, 0, 5.0, 5.0) == pytest.approx(0.0)
    assert tilt(pol, 9, 5.0, 5.0) == pytest.approx(0.2 * math.log(10))  # a burst: more room
    assert tilt(pol, 0, 7.0, 5.0) == pytest.approx(-0.2)  # more at stake than usual: cut deeper
    assert tilt(pol, 0, 3.0, 5.0) == pytest.approx(0.2)  # less: cut less
    assert tilt(SoftPolicy(burst_tilt=0, stake_tilt=0), 9, 7.0, 5.0) == pytest.approx(0.0)
    assert stake_of(4, 3600) == pytest.approx(math.log(4 * 3600))


def test_budget_controller_settles_at_its_target():
    pol = SoftPolicy(gamma=0.05, extension_budget=0.2, aim=0.5)
    ctl = BudgetController(pol)
    rng = np.random.default_rng(0)
    hits = []
    for _ in range(20000):  # a job is extended with probability falling in s: p = 0.5·exp(−2s)
        p = min(1.0, 0.5 * math.exp(-2 * ctl.s))
        hit = rng.random() < p
        hits.append(hit)
        ctl.extended() if hit else ctl.ended()
    assert np.mean(hits[5000:]) == pytest.approx(0.1, abs=0.01)  # aim × budget
    ctl = BudgetController(pol, s=99.0)
    assert ctl.s == pytest.approx(math.log(4.0))  # clipped to the range


def test_stake_mean_forgets_beyond_its_window():
    m = StakeMean(window=10)
    for _ in range(100):
        m.add(1.0)
    for _ in range(100):
        m.add(5.0)
    assert m.mean == pytest.approx(5.0, abs=0.01)
    assert m.add(float("nan")) == pytest.approx(m.mean)


def _burst(n_bursts=30, size=10, need=3000.0):
    """Bursts of one template started together; each run takes ``need``, the first of the day misleads."""
    recs, i = [], 0
    for b in range(n_bursts):
        t0 = b * 20000.0
        for k in range(size):
            used = 100.0 if (b % 3 == 0) else need  # every third burst is short: the history misleads
            recs.append(_rec(i, t0 + k, used, 8000.0))
            i += 1
    return prepare(recs, "time", keep_templates=True)


def test_the_burst_tilt_spends_fewer_extensions_on_bursts():
    p = _burst()
    bound = np.full(p.n, np.log(110 / 8000))
    ext = {}
    for b in (0.0, 1.0):
        lim = hold_budget(p, bound, Guard(), SoftPolicy(burst_tilt=b, stake_tilt=0.0), in_flight=running_at(p)[0])
        ext[b] = int(np.sum(np.isfinite(lim) & (lim < p.need)))
    assert ext[1.0] < ext[0.0]


def test_soft_starts_use_history_at_the_start_and_running_siblings():
    # two runs of a template, 1000 s each; then a third starts while a fourth sibling has run 5000 s
    recs = [
        _rec(0, 0, 1000, 20000),
        _rec(1, 2000, 1000, 20000),
        _rec(2, 5000, 9000, 20000),
        _rec(3, 10000, 1000, 20000),
    ]
    p = prepare(recs, "time", keep_templates=True)
    pol = SoftPolicy(min_recent=2, burst_tilt=0.0, stake_tilt=0.0, gamma=0.0)
    lim, use = soft_starts(p, np.full(p.n, np.log(0.5)), Guard(), pol)
    i = int(np.argmax(p.start == 10000))
    assert use[i]
    # the rule alone says 1.1 × 1000; the sibling started at 5000 has run 5000 s: 1.1 × 5000 wins,
    # with the watcher's 120 s lead on top, in whole minutes
    assert lim[i] == pytest.approx(math.ceil((5500.0 + pol.lead_s) / 60) * 60)


def test_soft_state_keeps_its_scale_in_the_store_and_forgets_a_stale_listing(tmp_path):
    store = Store.open(tmp_path / "h.db")
    try:
        st = SoftState(SoftPolicy(gamma=0.1), store, max_age_s=60)
        st.extended()
        st.save()
        again = SoftState(SoftPolicy(gamma=0.1), store)
        assert again.scale == pytest.approx(0.1 * (1 - 0.095)) and store.get_meta(SCALE_KEY) == pytest.approx(
            again.scale
        )
        st.set_running({"t": (3, 100.0)}, now=1000.0)
        assert st.running("t", now=1010.0) == (3, pytest.approx(110.0))  # it has run on since the listing
        assert st.running("other", now=1010.0) == (0, 0.0)
        assert st.running("t", now=1100.0) == (0, 0.0)  # the watcher stopped listing: no evidence
    finally:
        store.close()


def test_settings_reach_the_policy():
    s = HarpSettings(predict={"soft_burst_tilt": 0.5, "soft_stake_tilt": 0.0})
    pol = SoftPolicy.from_settings(s.predict)
    assert pol.burst_tilt == 0.5 and pol.stake_tilt == 0.0
    assert pol.explain()["burst_tilt"] == 0.5
    with pytest.raises(Exception, match="soft_stake_tilt"):
        HarpSettings(predict={"soft_stake_tilt": -1})


def test_the_last_extension_goes_to_the_request_in_the_metric_and_the_queue():
    from harpd.evaluate.schedule_simulation import escalation_hook
    from harpd.replay.soft_walk import extend

    # limits in whole minutes, as harpd's extender sets them
    start, need, req, cens = (
        np.array([120.0, 120.0, 120.0]),
        np.array([350.0, 150.0, 1200.0]),
        np.array([1200.0] * 3),
        np.array([False, False, True]),
    )
    final, ext, killed = extend(start, need, req, cens, max_extensions=2)
    # 120 → 240 → 1200 (the second, last, to the request); 120 → 240 fits; censored: to its request
    assert final.tolist() == [1200.0, 240.0, 1200.0] and ext.tolist() == [2, 1, 2] and not killed.any()
    final, ext, _ = extend(start, need, req, cens, max_extensions=1)
    assert final.tolist() == [1200.0, 1200.0, 1200.0] and ext.tolist() == [1, 1, 1]
    final, ext, _ = extend(start, need, req, cens)  # unbounded: doubling all the way
    assert final.tolist() == [480.0, 240.0, 1200.0] and ext.tolist() == [2, 1, 4]
    hook = escalation_hook(np.array([1200.0]), np.array([900.0]), 3, "soft", max_extensions=2)
    assert hook(0, 120.0, 0) == 240.0 and hook(0, 240.0, 1) == 900.0 and hook(0, 900.0, 2) is None
    # the replay's rule is harpd's extender's: the same limits from the same calls
    from harpd.predict.extension import next_extension

    assert next_extension(120, 1200, 900, 0, 2).limit_s == 240 and next_extension(240, 1200, 900, 1, 2).limit_s == 900


def test_the_smallest_soft_limit_leaves_room_for_the_watchers_lead_and_interval():
    # the real-cluster finding: a 1-minute limit with a 120 s lead is extended at the first look
    s = HarpSettings(watch={"margin_s": 120.0, "interval_s": 30.0})
    pol = SoftPolicy.from_settings(s.predict, s.watch)
    assert (pol.lead_s, pol.look_s, pol.min_limit_s) == (120.0, 30.0, 180.0)
    assert SoftPolicy(lead_s=300.0, look_s=60.0).min_limit_s == 360.0
    from harpd.predict.soft import soft_guard

    g = Guard(floor=60.0)
    assert soft_guard(g).floor == 60.0 and soft_guard(g, pol).floor == 180.0
    from harpd.predict.allocation import allocate

    v, _ = allocate(3600.0, math.log(30.0 / 3600.0), 10, None, soft_guard(g, pol))
    assert v == 180.0  # a 30 s bound becomes 3 min, not 1


def test_a_soft_limit_holds_the_bound_with_the_watchers_lead_on_top():
    """harpd extends a job once less than the lead is left: the limit is the bound plus the lead.

    Without it a job that needs 600 s of a 660 s limit would be extended at 540 s
    (the watcher's look within 120 s of the limit), an extension that only the
    lead made; with it the job ends inside its limit and is never watched out.
    """
    from harpd.predict.allocation import allocate
    from harpd.predict.soft import soft_guard
    from harpd.replay.soft_walk import extend

    pol = SoftPolicy(lead_s=120.0, look_s=30.0)
    g = soft_guard(Guard(floor=60.0), pol)
    assert g.headroom == 120.0 and soft_guard(Guard(floor=60.0)).headroom == 0.0
    req = 3600.0
    v, why = allocate(req, math.log(600.0 / req), 10, None, g)
    assert v == pytest.approx(720.0) and why == "bound"
    # the lead makes a bound near the request one to leave alone: 3200 + 120 s is 92 % of an hour
    assert allocate(req, math.log(3200.0 / req), 10, None, g) == (
        None,
        "bound with the watcher's 120 s lead is 92% of the request: kept",
    )
    assert allocate(600.0, math.log(500.0 / 600.0), 10, None, g) == (
        None,
        "bound with the watcher's 120 s lead is above the request; raising is off",
    )
    assert allocate(req, math.log(3200.0 / req), 10, None, soft_guard(Guard(floor=60.0), None))[0] == pytest.approx(
        3200.0
    )
    assert (
        allocate(req, math.log(30.0 / req), 10, None, g)[0] == 180.0
    )  # 30 + 120 s: under the smallest limit the watcher honours
    # a job that needs exactly its bound is not extended by the watcher; one whose limit is only 60 s above its need is
    need = np.array([600.0])
    _, ext, _ = extend(np.array([v]), need, np.array([req]), np.zeros(1, bool), lead_s=120.0, look_s=30.0)
    assert ext.tolist() == [0]
    _, ext, _ = extend(np.array([660.0]), need, np.array([req]), np.zeros(1, bool), lead_s=120.0, look_s=30.0)
    assert ext.tolist() == [1]


def test_the_metric_extends_a_job_within_the_lead_of_its_limit():
    from harpd.replay.soft_walk import extend

    start, req, cens = np.array([300.0, 300.0, np.nan]), np.array([1000.0] * 3), np.zeros(3, bool)
    need = np.array([170.0, 200.0, 990.0])
    _, ext, _ = extend(start, need, req, cens, max_extensions=8)
    assert ext.tolist() == [0, 0, 0]
    # with a 120 s lead the 300 s limit holds only runs up to 180 s; the request is never watched
    final, ext, _ = extend(start, need, req, cens, max_extensions=8, lead_s=120.0)
    assert ext.tolist() == [0, 1, 0] and final.tolist() == [300.0, 600.0, 1000.0]


def test_the_metric_extends_at_the_watchers_first_look_as_the_controller_counts() -> None:
    """Looks every 30 s on one clock: a run that ends before the first look within the lead is not extended."""
    from harpd.replay.soft_walk import extend

    start, req, cens = np.array([300.0, 300.0, 300.0]), np.array([1000.0] * 3), np.zeros(3, bool)
    t0 = np.array([0.0, 10.0, 10.0])
    # limits end at 300 (job 0) and 310 (jobs 1, 2): the first look within 120 s of either is at 210
    need = np.array([205.0, 195.0, 205.0])
    _, ext_lead, _ = extend(start, need, req, cens, max_extensions=8, lead_s=120.0)
    assert ext_lead.tolist() == [1, 1, 1]  # without the looks: every run past limit - lead
    _, ext, _ = extend(start, need, req, cens, max_extensions=8, lead_s=120.0, look_s=30.0, started_at=t0)
    # jobs 0 and 1 end at 205, before that look: not extended; job 2 ends at 215, after it: extended
    assert ext.tolist() == [0, 0, 1]


@pytest.mark.parametrize("lead,look", [(120.0, 30.0), (120.0, 0.0), (0.0, 30.0), (50.0, 7.0)])
def test_the_vector_watcher_agrees_with_the_scalar_one(lead: float, look: float) -> None:
    from harpd.watcher_timing import watcher_look, watcher_looks

    rng = np.random.default_rng(3)
    t = rng.uniform(0, 1e5, 500)
    limit_at = t + rng.uniform(0, 5000, 500)
    got = watcher_looks(t, lead, look, limit_at)
    want = [watcher_look(a, lead, look, b) for a, b in zip(t, limit_at, strict=True)]
    assert np.allclose(got, want)
