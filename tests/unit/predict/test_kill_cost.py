"""Under hard limits a time cut is made only where the queue's expected gain outweighs a kill's cost."""

from __future__ import annotations

import math

from harpd.predict.kill_cost import why_kept, worth_cutting


def test_no_gain_no_cut():
    # the default (no gain measured on any trace): nothing is worth a kill
    assert not worth_cutting(7200.0, 600.0, 0.05, 0.0)
    assert "kill costs the queue more" in why_kept(0.0)


def test_a_cut_pays_for_its_kill_risk_only_when_deep_enough():
    # p L < gain (1 - p) (R - L): with p = 5%, gain 5%: L < 0.4872 R
    r = 10000.0
    assert worth_cutting(r, 4800.0, 0.05, 0.05)
    assert not worth_cutting(r, 4900.0, 0.05, 0.05)
    # a likelier kill needs a deeper cut; a sure kill is never worth it
    assert not worth_cutting(r, 4800.0, 0.10, 0.05)
    assert not worth_cutting(r, 1.0, 1.0, 1.0)
    assert not worth_cutting(r, r, 0.0, 1.0)  # no cut at all


def test_the_kernel_gates_as_worth_cutting_says():
    # the one gate harpd and the replay apply (harpd.predict.decide): a cut is kept only where it pays
    from harpd.predict.allocation import Guard
    from harpd.predict.decide import TIME, KernelInput, allocation

    guard = Guard(min_history=0, floor=60.0, leave_alone_ratio=0.9, min_fraction=0.0)
    for want_s, gain in ((4800.0, 0.05), (4900.0, 0.05), (200.0, 0.05), (4800.0, 0.0)):
        inp = KernelInput(10000.0, math.log(want_s / 10000.0), 10, None, guard, hard_cut_gain=gain)
        got = allocation(TIME, inp).amount
        if worth_cutting(10000.0, want_s, 0.05, gain):
            assert got == math.ceil(want_s / 60) * 60  # cut, in whole minutes
        else:
            assert got is None
    # no gain given (the replay's default): not gated
    inp = KernelInput(10000.0, math.log(0.49), 10, None, guard)
    assert allocation(TIME, inp).amount == 4920.0


def test_the_queue_verdict_says_what_harp_did_in_words():
    from harpd.cli.replay_verdict import queue_lines

    q = {
        "replicas": 5,
        "procs": 100,
        "notes": [],
        "policies": [
            {"policy": "harp-soft", "kills": 0, "extensions": 12},
            {"policy": "harp-hard", "kills": 0, "extensions": 0},
        ],
        "vs_users": {
            "harp-soft": {
                "mean_wait_s": {"rel_diff": -0.054, "se": 0.005, "verdict": "lower"},
                "mean_bounded_slowdown": {"rel_diff": 0.01, "se": 0.02, "verdict": "no clear difference"},
            },
            "harp-hard": {
                "mean_wait_s": {"rel_diff": 0.0, "se": 0.0, "verdict": "no clear difference"},
                "mean_bounded_slowdown": {"rel_diff": 0.0, "se": 0.0, "verdict": "no clear difference"},
            },
        },
    }
    soft = queue_lines(q, "soft")[0]
    assert "under soft limits harp lowered the mean wait by 5.4%" in soft
    assert "did not clearly change the mean bounded slowdown (+1.0% (±2.0%), within two standard errors" in soft
    hard = queue_lines(q, "hard")
    assert "under hard limits" in hard[0] and "killed no job" in hard[1]
