"""Deadline plans (RubberBand): goals parsing, the scaling fit, cheapest-in-time, per-stage search plans."""

from __future__ import annotations

import itertools
import math

import pytest

from harpd.dnn.deadline import Layout, plan_stages, sha_stages, static_plan
from harpd.dnn.errors import DnnError
from harpd.dnn.goals import RunTime, goals_from_tokens, parse_batch, parse_duration
from harpd.dnn.plan import plan_dnn_job
from harpd.dnn.scaling import Fit, ScalingModel, fit_terms
from harpd.slurm.billing import gpu_weight, parse_billing_weights, partition_billing

LINE = (
    "#HARP dnn params=1.5e9 layers=48 hidden=1600 heads=25 seq_len=1024 micro_batch=8 "
    "attention=flash recompute=full zero=auto "
)


def model(**kw) -> ScalingModel:
    return ScalingModel(params=1_500_000_000, seq_len=1024, micro_batch=8, recompute="full", tokens=20e9, **kw)


# ------------------------------------------------------------------ goals


@pytest.mark.parametrize(
    "text,seconds",
    [
        ("8h", 28800),
        ("90m", 5400),
        ("2d", 172800),
        ("1:30:00", 5400),
        ("1-02:00:00", 93600),
        ("120", 7200),
        ("2.5h", 9000),
    ],
)
def test_durations(text, seconds):
    assert parse_duration("deadline", text) == seconds


@pytest.mark.parametrize("text", ["abc", "0", "-5h", "1e99h", "400d", "8 hours please", ""])
def test_bad_durations_are_one_line(text):
    with pytest.raises(DnnError) as exc:
        parse_duration("deadline", text)
    assert "\n" not in str(exc.value) and "deadline=" in str(exc.value)


@pytest.mark.parametrize("text", ["0..5", "abc", "10..5", "1..1e12", "..", "256..", "nan..4"])
def test_bad_batch_ranges(text):
    with pytest.raises(DnnError) as exc:
        parse_batch(text)
    assert "batch=" in str(exc.value) and "\n" not in str(exc.value)


def test_goal_keys_need_the_work():
    with pytest.raises(DnnError, match="tokens="):
        goals_from_tokens({"deadline": "8h"})
    g = goals_from_tokens({"deadline": "8h", "runs": "1:10h,4xa100:3h,16xa100x2n:1h"})
    assert g.runs == (RunTime(1, 36000.0), RunTime(4, 10800.0, "a100"), RunTime(16, 3600.0, "a100", 2))
    with pytest.raises(DnnError, match="runs"):
        goals_from_tokens({"deadline": "8h", "runs": ",".join(["1:1h"] * 33)})


# ------------------------------------------------------------------ scaling fit


def test_fit_recovers_a_known_curve():
    m = model()
    truth = Fit(alpha=1.3, beta=0.7, gamma_s=600.0)
    true_model = ScalingModel(params=m.params, seq_len=1024, micro_batch=8, recompute="full", tokens=20e9, fit=truth)
    layouts = [(1, 1), (2, 1), (4, 1), (8, 1), (16, 2), (32, 4)]
    runs = [RunTime(n, true_model.run_time("a100", n, nodes), "a100", nodes) for n, nodes in layouts]
    fitted = m.fitted(runs, "a100")
    assert fitted.fit.alpha == pytest.approx(1.3, rel=1e-3)
    assert fitted.fit.beta == pytest.approx(0.7, rel=1e-3)
    assert fitted.fit.gamma_s == pytest.approx(600.0, rel=1e-2)
    # and it predicts a count it never saw
    assert fitted.run_time("a100", 64, 8) == pytest.approx(true_model.run_time("a100", 64, 8), rel=1e-3)


def test_one_run_scales_the_default_model_through_that_run():
    m = model()
    fitted = m.fitted([RunTime(4, 12 * 3600.0, "a100")], "a100")
    assert fitted.run_time("a100", 4, 1) == pytest.approx(12 * 3600.0)
    assert fitted.fit.alpha == fitted.fit.beta


def test_fit_never_goes_negative():
    fit = fit_terms([(100.0, 0.0, 50.0), (50.0, 10.0, 80.0), (25.0, 40.0, 20.0)])
    assert fit.alpha > 0 and fit.beta >= 0 and fit.gamma_s >= 0


# ------------------------------------------------------------------ one job under a deadline


def _lays():
    return [Layout("a100", nodes, g, 1, 1.0, 64) for nodes in (1, 2, 4) for g in (1, 2, 4, 8)] + [
        Layout("h100", nodes, g, 1, 2.5, 32) for nodes in (1, 2) for g in (1, 2, 4)
    ]


def test_single_job_is_the_cheapest_that_meets_the_deadline():
    m = model()
    lays = _lays()
    for deadline in (4 * 3600, 12 * 3600, 48 * 3600, 400 * 3600):
        plan = plan_stages(m, lays, [(1, m.tokens)], deadline)
        feasible = [
            (lay.n_gpus * lay.weight * m.run_time(lay.gpu_type, lay.n_gpus, lay.nodes, 1) / 3600, lay)
            for lay in lays
            if m.run_time(lay.gpu_type, lay.n_gpus, lay.nodes, 1) <= deadline
        ]
        if not feasible:
            assert plan.error and "cannot be met" in plan.error
            continue
        assert plan.error is None and plan.time_s <= deadline
        assert plan.cost == pytest.approx(min(c for c, _ in feasible))


def test_tighter_deadline_costs_more_and_uses_more_gpus():
    m = model()
    loose = plan_stages(m, _lays(), [(1, m.tokens)], 1000 * 3600)
    tight = plan_stages(m, _lays(), [(1, m.tokens)], loose.time_s / 4)
    assert tight.error is None
    assert tight.stages[0].layout.n_gpus > loose.stages[0].layout.n_gpus
    assert tight.cost > loose.cost


def test_infeasible_deadline_is_one_line():
    m = model()
    plan = plan_stages(m, _lays(), [(1, m.tokens)], 60.0)
    assert plan.error.startswith("deadline 1.0min cannot be met: the fastest configuration is predicted to take")
    assert "\n" not in plan.error


# ------------------------------------------------------------------ successive halving


def test_sha_stages_add_up_to_one_full_training():
    stages = sha_stages(27, 3, 9e9)
    assert [n for n, _ in stages] == [27, 9, 3, 1]
    assert sum(t for _, t in stages) == pytest.approx(9e9)
    assert stages[0][1] == pytest.approx(9e9 / 27)


def test_stage_plan_is_optimal_against_brute_force():
    m = model()
    lays = [Layout("a100", 1, g, 1, 1.0, 64) for g in (1, 2, 4, 8)] + [Layout("a100", 2, 8, 1, 1.0, 64)]
    stages = sha_stages(16, 4, 4e9)
    fastest = plan_stages(m, lays, stages, math.inf).fastest_s
    for factor in (1.1, 1.6, 3.0):
        deadline = fastest * factor
        plan = plan_stages(m, lays, stages, deadline)
        best = math.inf
        for combo in itertools.product(lays, repeat=len(stages)):
            t = c = 0.0
            for (trials, tok), lay in zip(stages, combo):
                rt = m.run_time("a100", lay.n_gpus, lay.nodes, 1, tokens=tok)
                waves = math.ceil(trials / max(1, lay.capacity // lay.n_gpus))
                t += waves * rt
                c += trials * lay.n_gpus * rt / 3600
            if t <= deadline:
                best = min(best, c)
        assert plan.cost == pytest.approx(best, rel=1e-9)
        static = static_plan(m, lays, stages, deadline)
        assert static is not None and static.cost >= plan.cost - 1e-9


# ------------------------------------------------------------------ through plan_dnn_job


def test_plan_dnn_job_with_deadline_changes_gres_and_explains(site):
    plan = plan_dnn_job([LINE + "deadline=24h tokens=20e9"], {}, None, site)
    assert plan.error is None
    goals = plan.explain["dnn"]["goals"]
    assert goals["predicted_time_h"] <= 24 and goals["predicted_billed_gpu_hours"] > 0
    assert goals["summary"].startswith("deadline plan: ")
    gres = next(c for c in plan.changes if c.option == "gres").value
    s = goals["stages"][0]
    assert gres == f"gpu:{s['gpu_type']}:{s['gpus_per_node']}"
    assert plan.explain["dnn"]["chosen"]["n_gpus"] == s["n_gpus"]


def test_plan_dnn_job_infeasible_deadline_leaves_job_unchanged(site):
    plan = plan_dnn_job([LINE + "deadline=10m tokens=20e9"], {}, None, site)
    assert plan.changes == [] and "cannot be met" in plan.error and "\n" not in plan.error


def test_search_plan_gives_the_submitted_stage(site):
    line = LINE + "deadline=40h tokens=5e9 trials=27 eta=3 stage=2"
    plan = plan_dnn_job([line], {"array": "0-2"}, None, site)
    assert plan.error is None
    goals = plan.explain["dnn"]["goals"]
    assert [s["trials"] for s in goals["stages"]] == [27, 9, 3, 1]
    chosen = plan.explain["dnn"]["chosen"]
    assert chosen["n_gpus"] == goals["stages"][2]["n_gpus"]
    assert goals["static"]["billed_gpu_hours"] >= goals["predicted_billed_gpu_hours"] - 1e-6
    bad = plan_dnn_job([LINE + "tokens=5e9 trials=27 eta=3 stage=9"], {}, None, site)
    assert "only 4 stages" in bad.error


# ------------------------------------------------------------------ billing weights from Slurm


def test_billing_weights_parse_and_type_wins():
    w = parse_billing_weights("CPU=1.0,Mem=0.25G,GRES/gpu=2.0,GRES/gpu:h100=0.5")
    assert w == {"cpu": 1.0, "mem": 0.25, "gres/gpu": 2.0, "gres/gpu:h100": 0.5}
    assert gpu_weight(w, "h100") == 0.5 and gpu_weight(w, "a100") == 2.0 and gpu_weight({}, "a100") is None
    parts = partition_billing(
        "PartitionName=gpu-h100 AllowGroups=ALL TRESBillingWeights=CPU=1,GRES/gpu:h100=0.4 "
        "State=UP\nPartitionName=cpu State=UP\n"
    )
    assert parts == {"gpu-h100": {"cpu": 1.0, "gres/gpu:h100": 0.4}, "cpu": {}}


def test_slurm_billing_overrides_the_config_weight(site):
    line = LINE + "deadline=200h tokens=20e9"
    plain = plan_dnn_job([line], {}, None, site)
    # config: h100 at weight 2.5 gives more FLOPs per billed hour than a100 at 1 (989/2.5 > 312)
    dear_h100 = plan_dnn_job([line], {}, None, site, billing={"gpu-h100": {"gres/gpu:h100": 4.0}})
    assert plain.explain["dnn"]["goals"]["stages"][0]["gpu_type"] == "h100"
    assert dear_h100.explain["dnn"]["goals"]["stages"][0]["gpu_type"] == "a100"
    assert dear_h100.explain["dnn"]["goals"]["billing"]["h100"]["from"] == "TRESBillingWeights of gpu-h100"


def test_fit_keeps_the_compute_term_on_odd_runs():
    m = model()
    flat = m.fitted([RunTime(1, 60.0), RunTime(2, 60.0), RunTime(4, 60.0)], "a100")
    assert flat.fit.alpha > 0 and flat.run_time("a100", 8, 1) > 0
    superlinear = m.fitted([RunTime(1, 36000.0), RunTime(2, 60.0)], "a100")
    assert superlinear.fit.alpha > 0 and superlinear.fit.beta > 0  # comm kept in the default's ratio


def test_huge_search_plans_in_bounded_time(site):
    import time

    t0 = time.monotonic()
    plan = plan_dnn_job([LINE + "tokens=1e16 trials=100000 eta=2"], {}, None, site)
    assert time.monotonic() - t0 < 60  # about a second when the machine is idle
    assert plan.error is None and len(plan.explain["dnn"]["goals"]["stages"]) == 17


def test_array_size_that_is_not_the_stage_count_is_noted(site):
    line = LINE + "tokens=5e9 trials=27 eta=3 stage=1"
    same = plan_dnn_job([line], {}, None, site, array_size=9)
    other = plan_dnn_job([line], {}, None, site, array_size=27)
    assert not any("the array has" in n for n in same.explain["dnn"]["notes"])
    assert any(n.startswith("the array has 27 task(s) but stage 1") for n in other.explain["dnn"]["notes"])
