"""Soft limits in the replay (extend, never kill) and in the live predictor."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from replay_helpers import rec as _rec
from replay_helpers import write_swf as _write_swf

from harpd.cli.main import main as harp_main
from harpd.predict.allocation import Guard
from harpd.predict.soft import SoftPolicy
from harpd.replay.dataset import prepare
from harpd.replay.engine import ReplayConfig, run
from harpd.replay.metric import Jobs, evaluate_soft
from harpd.replay.soft_walk import extend, hold_budget, recent_at, soft_starts

NAN = np.nan


def test_a_job_that_outgrows_its_start_limit_is_extended_never_killed():
    # start 100 s, needs 350 s of a 1000 s request: doubled and in whole minutes, as harpd's extender
    # sets a limit: 100 → 240 (200 s rounded up) → 480 (two extensions)
    final, ext, killed = extend(np.array([100.0]), np.array([350.0]), np.array([1000.0]), np.array([False]))
    assert final.tolist() == [480.0] and ext.tolist() == [2] and not killed.any()
    # doubling past the request stops at the request: 300 → 600 → 1000
    final, ext, _ = extend(np.array([300.0]), np.array([900.0]), np.array([1000.0]), np.array([False]))
    assert final.tolist() == [1000.0] and ext.tolist() == [2]
    # a job that fits its start limit is not extended; NaN: the request stands
    final, ext, _ = extend(
        np.array([500.0, NAN]), np.array([350.0, 350.0]), np.array([1000.0, 1000.0]), np.array([False, False])
    )
    assert final.tolist() == [500.0, 1000.0] and ext.tolist() == [0, 0]


def test_a_job_past_its_own_request_is_the_users_kill_not_harps():
    # censored: killed at its own request 1000 in the trace; harp's 250 is extended to it
    final, ext, killed = extend(np.array([250.0]), np.array([1000.0]), np.array([1000.0]), np.array([True]))
    assert final.tolist() == [1000.0] and ext.tolist() == [2] and killed.tolist() == [False]
    m = evaluate_soft(
        "x", np.array([250.0]), Jobs(np.array([1000.0]), np.array([1000.0]), np.array([True]), np.array([1.0]))
    )
    assert m.harp_kills == 0 and m.over_reservation == 0.0


def test_soft_metric_by_hand():
    # R, U, start S, cores w; F after extensions
    req = np.array([1000.0, 1000.0, 1000.0, 800.0])
    need = np.array([350.0, 100.0, 1000.0, 200.0])
    cens = np.array([False, False, True, False])
    start = np.array([100.0, 200.0, 500.0, NAN])
    w = np.array([2.0, 1.0, 1.0, 4.0])
    # F = 480 (two ext, whole minutes: 100 → 240 → 480), 200, 1000 (censored: one ext to R), 800 (request)
    base = evaluate_soft("request", np.full(4, NAN), Jobs(need, req, cens, w))
    m = evaluate_soft("harp", start, Jobs(need, req, cens, w), extension_budget=0.5, baseline=base)
    used = np.array([350.0, 100.0, 1000.0, 200.0])
    over = 2 * (480 - 350) + 1 * (200 - 100) + 0 + 4 * (800 - 200)
    over_users = 2 * 650 + 1 * 900 + 0 + 4 * 600
    assert m.over_reservation == pytest.approx(over)
    assert m.over_vs_request == pytest.approx(over / over_users)
    # planned wrongly: Σ w·|S − U| (S = R where harp left it)
    plan = 2 * 250 + 1 * 100 + 1 * 500 + 4 * 600
    plan_users = 2 * 650 + 1 * 900 + 0 + 4 * 600
    su = float(np.sum(w * used))
    assert m.planned_wrongly == pytest.approx(plan / su)
    assert m.planned_wrongly_vs_request == pytest.approx(plan / plan_users)
    # changed: jobs 0-2; extended: jobs 0 and 2 (of 4 jobs); three extensions in all
    assert m.changed == pytest.approx(0.75)
    assert m.extended_share == pytest.approx(0.5) and m.extensions_per_job == pytest.approx(3 / 3)
    assert m.extended_share_changed == pytest.approx(2 / 3)
    assert m.harp_kills == 0 and m.killed == 0.0 and m.consumed_vs_request == pytest.approx(1.0)
    # under_rate: fitting jobs that outgrew their start limit (job 0 of 3)
    assert m.under_rate == pytest.approx(1 / 3)
    # kept at the request and never extended: job 3 alone (job 2 started at R's half and was extended)
    assert m.kept_share == pytest.approx(0.25)
    assert m.kept_over == pytest.approx(4 * 600) and m.kept_over_vs_request == pytest.approx(2400 / over_users)
    assert m.kept_early_over == 0.0  # it used a quarter of its request, not under a tenth


def test_the_over_reservation_left_is_traced_to_the_jobs_kept_and_those_that_ended_early():
    # R 1000 each; job 0 ended early (50 s) and kept its request, job 1 used 500 and kept it, job 2 was
    # cut to 100 and extended to R, job 3 was set to R itself (managed in name only: kept too)
    req = np.full(4, 1000.0)
    need = np.array([50.0, 500.0, 400.0, 30.0])
    start = np.array([NAN, NAN, 100.0, 1000.0])
    w = np.array([3.0, 1.0, 1.0, 2.0])
    cens = np.zeros(4, bool)
    base = evaluate_soft("request", np.full(4, NAN), Jobs(need, req, cens, w))
    m = evaluate_soft("harp", start, Jobs(need, req, cens, w), baseline=base, max_extensions=1)
    users = 3 * 950 + 1 * 500 + 1 * 600 + 2 * 970
    assert m.kept_share == pytest.approx(0.75)
    assert m.kept_over == pytest.approx(3 * 950 + 500 + 2 * 970)
    assert m.kept_early_over == pytest.approx(3 * 950 + 2 * 970)
    assert m.kept_early_over_vs_request == pytest.approx((3 * 950 + 2 * 970) / users)
    # the extended job's over-reservation is all it adds: harp's row is the users' here
    assert m.over_vs_request == pytest.approx(1.0)
    # the users' own row has no baseline to be compared with
    assert base.kept_over_vs_request is None


def test_recent_runs_are_those_finished_before_the_start():
    # same template; job 2 was submitted before jobs 1 and 3 ended but started after both
    recs = [_rec(1, 0, 100, 1000), _rec(2, 50, 300, 1000), _rec(3, 60, 50, 1000)]
    recs[1].start_time = 150.0
    recs[1].end_time = 450.0
    p = prepare(recs, "time", keep_templates=True)
    assert p.start.tolist() == [0.0, 150.0, 60.0]
    count, mx = recent_at(p, p.start, 5)
    assert count.tolist() == [0, 2, 0]
    assert mx[1] == pytest.approx(0.1)  # the most of 100/1000 and 50/1000
    # at submission job 2 knew nothing
    count_s, _ = recent_at(p, p.submit, 5)
    assert count_s.tolist() == [0, 0, 0]


def test_start_limits_follow_the_template_and_skip_the_walk_back_floor():
    recs = [_rec(i, i * 1000, 100, 4000) for i in range(8)]
    p = prepare(recs, "time", keep_templates=True)
    # no watcher (lead 0): the floor is the hard guard's minute; no budget controller (gamma 0): the rule alone
    policy = SoftPolicy(recent_margin=1.5, lead_s=0, look_s=0, gamma=0.0)
    lim, by_rule = soft_starts(p, np.full(p.n, NAN), Guard(min_history=3), policy)
    # 3 runs of 100 s known: 1.5 × 100 = 150 s, in the decision kernel's whole minutes 180 s: far
    # below the hard guard's floor (1/4 of the 4000 s request), which soft limits do not apply
    assert np.isnan(lim[:3]).all() and not by_rule[:3].any()
    assert lim[3:] == pytest.approx([180.0] * 5) and by_rule[3:].all()


def _habits(n=1600, seed=1):
    rng = np.random.default_rng(seed)
    recs, t = [], 0.0
    for i in range(n):
        u = int(rng.integers(0, 10))
        used = 300.0 * (u + 1) * rng.uniform(0.8, 1.2)
        t += rng.exponential(60)
        recs.append(_rec(i, t, used, 1200.0 * (u + 1), user=f"u{u}"))
    return recs


def test_hard_replay_is_unchanged_by_the_soft_inputs():
    cfg = dict(models=("request", "alea"))
    hard = run(prepare(_habits(600), "time", keep_templates=True), ReplayConfig(**cfg))
    plain = run(prepare(_habits(600), "time"), ReplayConfig(**cfg))  # templates kept or not: same figures
    assert hard.limits == "hard"
    assert [m.to_dict() for m in hard.metrics] == [m.to_dict() for m in plain.metrics]
    assert all(m.extended_share is None and m.limits == "hard" for m in hard.metrics)


def test_replay_soft_rows():
    p = prepare(_habits(900), "time", keep_templates=True)
    soft = run(
        p,
        ReplayConfig(limits="soft", bounds=True, models=("request", "alea", "harp"), min_train=300, retrain_every=300),
    )
    assert soft.limits == "soft" and "harp_soft" in soft.notes
    rows = {m.model: m for m in soft.metrics}
    assert {"request", "alea", "harp", "bound:causal-max5-start", "bound:clairvoyant-q50"} <= set(rows)
    h = rows["harp"]
    assert h.harp_kills == 0 and h.consumed_vs_request == pytest.approx(1.0)
    # learnable habits: far below the users' over-reservation and planning error, few extensions
    assert h.over_vs_request < 0.6 and h.planned_wrongly_vs_request < 0.6
    assert h.extended_share <= 0.25
    # the start limit per job: harp's alloc is finite where it changed the request
    assert np.isfinite(soft.alloc["harp"]).mean() == pytest.approx(h.changed)


def test_budget_controller_backs_off_after_extensions():
    # every run of the template takes 1000 s, but the bound says 100 s: each start is extended
    recs = [_rec(i, i * 2000, 1000, 8000) for i in range(40)]
    p = prepare(recs, "time", keep_templates=True)
    scales: list[float] = []
    pol = SoftPolicy(gamma=0.5, scale_range=(0.5, 4.0), lead_s=0, look_s=0)
    lim = hold_budget(p, np.full(p.n, np.log(100 / 8000)), Guard(min_history=1), pol, scales)
    got = lim[np.isfinite(lim)]
    # under soft limits a new program is sized too (a miss is one extension): job 0 gets the bound as it is,
    # in whole minutes as harpd asks sbatch (the decision kernel)
    assert len(got) == 40 and got[0] == pytest.approx(120.0)
    # job 0 outgrew it before job 1 started: s rose by γ·(1 − target), target = aim × budget = 0.095
    assert got[1] == pytest.approx(math.ceil(100.0 * np.exp(0.5 * (1 - 0.95 * 0.10)) / 60) * 60)
    assert got[-1] == pytest.approx(420.0)  # then every extension raised it, to the top of its range (400 s)
    assert np.all(np.diff(got) >= -1e-9)


def test_soft_needs_templates():
    p = prepare(_habits(200), "time")
    with pytest.raises(ValueError, match="soft limits"):
        run(p, ReplayConfig(limits="soft", models=("request",)))


def test_cli_soft_table_and_json(tmp_path, capsys):
    f = tmp_path / "syn.swf"
    _write_swf(f, _habits(1200))
    assert (
        harp_main(["replay", str(f), "--quiet", "--limits", "soft", "--models", "request,alea", "--format", "json"])
        == 0
    )
    d = json.loads(capsys.readouterr().out)
    assert d["limits"] == "soft" and d["soft_policy"]["extension_budget"] == pytest.approx(0.10)
    alea = d["models"][1]
    for k in ("extensions_per_job", "extended_share", "harp_kills", "planned_wrongly_vs_request"):
        assert alea[k] is not None
    assert harp_main(["replay", str(f), "--quiet", "--limits", "soft", "--models", "request,alea"]) == 0
    out = capsys.readouterr().out
    assert "soft limits" in out and "planned wrongly" in out and "extension_budget 0.1" in out
    assert harp_main(["replay", str(f), "--quiet", "--limits", "soft", "--resource", "mem"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--limits soft" in err[0]


# -- the live predictor's soft mode -----------------------------------------------


class _Half:
    """A stand-in model: every job needs at most half its request."""

    theta = None

    def predict(self, X, groups=None):
        return np.full(len(X), np.log(0.5))


def _live(soft: bool, model=None, used_s: float = 590.0, queue=None, **predict):
    from harpd.config import HarpSettings
    from harpd.models.envelope import ModelEnvelope
    from harpd.predict.live import ModelPredictor
    from harpd.records import JobRecord, Outcome

    env = ModelEnvelope(model=model or _Half(), name="half", relative=True, resource="time")
    p = ModelPredictor(HarpSettings(predict=predict), models={"time": env}, soft_limits=soft)
    if queue is not None and p.soft_state is not None:  # what the watcher's last listing gave (watch.feedback)
        p.soft_state.set_queue(queue[0], now=queue[1])
    recs = [
        JobRecord(
            job_id=str(i),
            source="t",
            user="ann",
            account="a",
            partition="cpu",
            signature="sig",
            submit_time=1000.0 * i,
            start_time=1000.0 * i,
            end_time=1000.0 * i + used_s,
            used_time_s=used_s,
            req_time_s=7200.0,
            req_cpus=4,
            outcome=Outcome.COMPLETED,
        )
        for i in range(8)
    ]
    p._add(recs)
    return p


def _decide(p):
    from harpd.protocol import JobRequest

    job = JobRequest(partition="cpu", signature="sig", request={"time_s": 7200, "ntasks": 4})
    return p.decide(job, "ann", 1000)


def test_live_soft_mode_cuts_to_recent_runs_and_says_it_extends():
    d = _decide(_live(True))
    (c,) = [c for c in d.changes if c.option == "time"]
    # 1.1 × 590 s and the watcher's 120 s lead, rounded up to the minute
    assert c.old == "02:00:00" and c.value == "00:13:00"
    assert "plus 120 s: harpd extends a job that long before its limit" in c.reason
    assert c.reason.endswith("(extended automatically up to 02:00:00 while it runs)")
    assert d.explain["time"]["watcher_lead_s"] == 120.0
    ex = d.explain["time"]
    assert ex["limits"] == "soft" and ex["extension_budget"] == pytest.approx(0.10)
    assert ex["quantile"] == pytest.approx(0.9) and "last runs" in ex["soft_rule"]


def test_live_hard_mode_keeps_the_time_unless_a_cut_outweighs_its_kill_risk():
    # the default: under hard limits no time cut pays for its kill risk
    d = _decide(_live(False))
    assert [c for c in d.changes if c.option == "time"] == []
    assert "kill costs the queue more than a cut saves" in d.explain["time"]["reason"]
    # a site that measured a gain gets the cut: 1 h of a 2 h request, p = 5%
    d = _decide(_live(False, hard_cut_gain=0.2))
    (c,) = [c for c in d.changes if c.option == "time"]
    assert c.value == "01:00:00" and "extended automatically" not in c.reason
    assert "limits" not in d.explain["time"]


class _Tiny:
    """A stand-in model: every job needs a hundredth of its request."""

    theta = None

    def predict(self, X, groups=None):
        return np.full(len(X), np.log(0.01))


def test_a_soft_limit_raised_to_the_watchers_least_limit_names_the_soft_policy_not_floor_time_s():
    """#45 E: 3 min is the soft policy's least limit (the watcher's lead and interval), not predict.floor_time_s."""
    d = _decide(_live(True, model=_Tiny(), used_s=5.0, floor_time_s=60))
    (c,) = [c for c in d.changes if c.option == "time"]
    assert c.value == "00:03:00", c.reason
    assert "predict.floor_time_s" not in c.reason and "the soft policy's least limit" in c.reason, c.reason


def test_live_queue_rule_weighs_a_soft_cut_against_the_queue_the_watcher_listed():
    import time

    from harpd.slurm.queue_load import QueueLoad

    deep = QueueLoad(pending_jobs=40, backlog_core_s=64 * 86400.0, running_jobs=16, total_cores=64)  # a day of work
    now = time.time()

    def time_change(d):
        return next((c for c in d.changes if c.option == "time"), None)

    # a shallow cut (1.1 x 3000 s + the lead: 57 min of 2 h) behind a day of waiting work: the request stands
    d = _decide(_live(True, used_s=3000.0, queue=(deep, now), queue_rule=True))
    assert time_change(d) is None
    assert "waiting work fills the machine" in d.explain["time"]["reason"], d.explain["time"]
    # the default weighs it too
    assert time_change(_decide(_live(True, used_s=3000.0, queue=(deep, now)))) is None
    # a site that turns the rule off: the queue is not read, the cut stands
    assert time_change(_decide(_live(True, used_s=3000.0, queue=(deep, now), queue_rule=False))).value == "00:57:00"
    # a deep cut (13 min of 2 h) stands behind the same queue
    assert time_change(_decide(_live(True, queue=(deep, now), queue_rule=True))).value == "00:13:00"
    # no listing yet, or one older than the soft state trusts (the watcher stopped): decided as without the rule
    assert time_change(_decide(_live(True, used_s=3000.0, queue_rule=True))).value == "00:57:00"
    stale = (deep, now - 3600.0)
    assert time_change(_decide(_live(True, used_s=3000.0, queue=stale, queue_rule=True))).value == "00:57:00"
    # hard limits: the queue rule is the soft policy's; there is no soft state to read
    assert _live(False, used_s=3000.0, queue=(deep, now), queue_rule=True).soft_state is None
