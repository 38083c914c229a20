"""Input shaking: perturbed copies of a trace, the same copies for every policy, paired verdicts."""

from __future__ import annotations

import numpy as np
import pytest

from harpd.simulate import LimitPolicy, Summary, Workload, simulate
from harpd.simulate.shake import mean_row, paired, shaken, simulate_shaken


def _work(n=300, seed=5):
    rng = np.random.default_rng(seed)
    return Workload(np.cumsum(rng.exponential(30, n)), rng.integers(1, 9, n), rng.exponential(400, n))


def test_shaken_moves_submissions_only_within_the_amplitude():
    w = _work()
    s = shaken(w, 60.0, np.random.default_rng(1))
    d = s.submit - w.submit
    assert np.all(np.abs(d) <= 60.0 + 1e-9) and np.any(d != 0) and np.all(s.submit >= 0)
    assert np.array_equal(s.procs, w.procs) and np.array_equal(s.runtime, w.runtime)
    assert shaken(w, 0.0, np.random.default_rng(1)) is w


def test_every_policy_sees_the_same_copies_and_copy_zero_is_the_trace():
    w = _work()
    a = LimitPolicy(np.maximum(w.runtime * 3, 1.0), name="a")
    b = LimitPolicy(np.maximum(w.runtime * 3, 1.0), name="b")  # the same limits under another name
    runs = simulate_shaken(w, [a, b], 16, replicas=4, amplitude_s=120.0, seed=7)
    assert [len(v) for v in runs.values()] == [4, 4]
    assert runs["a"][0] == simulate(w, a, 16).summary()  # copy 0: as recorded
    for sa, sb in zip(runs["a"], runs["b"]):  # common random numbers: identical policies, identical figures
        assert sa.mean_wait_s == sb.mean_wait_s and sa.mean_bounded_slowdown == sb.mean_bounded_slowdown
    assert len({s.mean_wait_s for s in runs["a"]}) > 1  # the copies do differ
    got = paired(runs["a"], runs["b"])["mean_wait_s"]
    assert {k: got[k] for k in ("rel_diff", "se", "verdict")} == {
        "rel_diff": 0.0,
        "se": 0.0,
        "verdict": "no clear difference",
    }
    with pytest.raises(ValueError, match="replicas 0"):
        simulate_shaken(w, [a], 16, replicas=0)


def _s(wait, bsld, name="x"):
    return Summary(
        policy=name,
        procs=1,
        jobs=10,
        rejected=0,
        mean_wait_s=wait,
        p95_wait_s=wait,
        mean_bounded_slowdown=bsld,
        utilization=0.5,
        useful_utilization=0.5,
        makespan_s=1.0,
        kills=3,
        extensions=0,
        abandoned=0,
        delayed_by_extension=0,
        delayed_by_kill=0,
        delayed_starts=0,
    )


def test_paired_verdicts_and_mean_rows():
    base = [_s(100, 10), _s(200, 20), _s(150, 15), _s(120, 12)]
    lower = [_s(90, 10.1), _s(181, 19.8), _s(134, 15.2), _s(109, 11.9)]
    got = paired(base, lower)
    assert got["mean_wait_s"]["verdict"] == "lower" and got["mean_wait_s"]["rel_diff"] == pytest.approx(
        -0.0975, abs=2e-3
    )
    assert got["mean_bounded_slowdown"]["verdict"] == "no clear difference"
    assert paired(base, [_s(130, 13), _s(260, 26), _s(200, 20), _s(160, 16)])["mean_wait_s"]["verdict"] == "higher"
    assert paired(base[:1], lower[:1])["mean_wait_s"]["verdict"] == "one copy"
    row = mean_row(base)
    assert row["mean_wait_s"] == pytest.approx(142.5) and row["replicas"] == 4 and row["kills"] == 3
    assert row["mean_wait_s_se"] == pytest.approx(np.std([100, 200, 150, 120], ddof=1) / 2)
    assert mean_row(base[:1])["mean_wait_s_se"] is None


def test_a_policy_that_cannot_differ_is_not_simulated_twice(monkeypatch):
    import harpd.simulate.shake as shake
    from harpd.simulate import LimitPolicy, Workload

    work = Workload(np.array([0.0, 1.0, 2.0]), np.array([1, 2, 1]), np.array([5.0, 3.0, 4.0]))
    lim = np.array([10.0, 10.0, 10.0])
    calls = []
    real = shake.simulate
    monkeypatch.setattr(shake, "simulate", lambda w, p, n, progress=None: calls.append(p.name) or real(w, p, n))
    pols = [
        LimitPolicy(lim, "hard", None, "users"),
        LimitPolicy(lim.copy(), "hard", None, "harp-hard"),
        LimitPolicy(lim, "hard", lambda j, l, e: None, "hooked"),
        # a closed-loop policy decides its limits as it runs: never a twin of one with the same starting limits
        LimitPolicy(lim.copy(), "hard", None, "closed", on_submit=lambda j, *_queue: 1.0 + j),
    ]
    out = shake.simulate_shaken(work, pols, 2, replicas=2)
    assert calls == ["users", "hooked", "closed", "users", "hooked", "closed"]
    assert [s.policy for s in out["harp-hard"]] == ["harp-hard"] * 2
    assert [s.mean_wait_s for s in out["harp-hard"]] == [s.mean_wait_s for s in out["users"]]
