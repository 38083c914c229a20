"""The watcher feeds the soft policy: siblings in flight from its listing, the budget from extensions and ends."""

from __future__ import annotations

import numpy as np
import pytest
from watch_fakes import register, settings, slurm, store, with_predict  # noqa: F401 (fixtures)

from harpd.predict.soft import SoftPolicy
from harpd.predict.soft_state import SoftState
from harpd.protocol import Decision, JobRequest, Resources
from harpd.records import JobRecord, Outcome
from harpd.watch.extend import Extender
from harpd.watch.feedback import SoftFeedback


class _Templates:
    """The predictor's part the feedback uses: a registered job's template."""

    def template_of(self, job, user):
        return f"{user}/{job.request.time_s}"


def _feedback(store, gamma=0.1):
    state = SoftState(SoftPolicy(gamma=gamma), store)
    return SoftFeedback(store, _Templates(), state), state


def test_running_siblings_are_counted_per_template(store, slurm):
    fb, state = _feedback(store)
    for jid, orig in (("1", 600), ("2", 600), ("3", 900)):
        register(store, jid, original_s=orig)
    slurm.add("1", used_s=100)
    slurm.add("2", used_s=250)
    slurm.add("3", used_s=40)
    slurm.add("4", used_s=999)  # not through harp: not harp's evidence
    register(store, "5", original_s=600)
    slurm.add("5", state="PENDING")  # pending: not running
    assert fb.tick(slurm.queue()) == 2
    n, longest = state.running("alice/600")
    assert n == 2 and longest == pytest.approx(250, abs=5)
    assert state.running("alice/900")[0] == 1
    slurm.jobs["2"].state = "COMPLETED"
    fb.tick(slurm.queue())
    assert state.running("alice/600")[0] == 1


def test_first_extension_steps_the_budget_up_once_and_is_saved(store, slurm):
    fb, state = _feedback(store)
    register(store, "7", original_s=600)
    slurm.add("7", limit_s=60, used_s=20)
    two = with_predict(settings(), soft_max_extensions=2)  # two extensions allowed: 1 -> 2 -> 10 min
    e = Extender(store, slurm, two, on_extended=fb.on_extended)
    assert e.tick(slurm.queue()) == 1
    up = state.scale
    assert up == pytest.approx(0.1 * (1 - 0.095))
    slurm.jobs["7"].time_used_s = 100
    assert e.tick(slurm.queue()) == 1  # a second extension of the same job
    assert state.scale == pytest.approx(up)  # counts once: the budget is a share of jobs
    fb.tick(slurm.queue())
    assert SoftState(SoftPolicy(gamma=0.1), store).scale == pytest.approx(up)  # survives a restart
    # its end does not step down again: it was counted when it was extended
    fb.on_outcome(JobRecord(job_id="7", source="slurm", outcome=Outcome.COMPLETED))
    assert state.scale == pytest.approx(up)


def test_a_harp_job_ending_without_extension_steps_down_others_do_not(store):
    fb, state = _feedback(store)
    register(store, "8", original_s=600)
    fb.on_outcome(JobRecord(job_id="8", source="slurm", outcome=Outcome.COMPLETED))
    down = state.scale
    assert down == pytest.approx(-0.1 * 0.095)
    fb.on_outcome(JobRecord(job_id="99", source="slurm", outcome=Outcome.COMPLETED))  # never through harp
    register(store, "10", original_s=600)
    fb.on_outcome(JobRecord(job_id="10_3", source="slurm", outcome=Outcome.COMPLETED))  # an array task of one
    assert state.scale == pytest.approx(2 * down)


def _predictor_with_history():
    from harpd.config import HarpSettings
    from harpd.models.envelope import ModelEnvelope
    from harpd.predict.live import ModelPredictor

    class Half:
        theta = None

        def predict(self, X, groups=None):
            return np.full(len(X), np.log(0.5))

    env = ModelEnvelope(model=Half(), name="half", relative=True, resource="time")
    p = ModelPredictor(HarpSettings(), models={"time": env}, soft_limits=True)
    p._add(
        [
            JobRecord(
                job_id=str(i),
                source="t",
                user="ann",
                account="a",
                partition="cpu",
                signature="sig",
                submit_time=1000.0 * i,
                start_time=1000.0 * i,
                end_time=1000.0 * i + 590,
                used_time_s=590.0,
                req_time_s=7200.0,
                req_cpus=4,
                outcome=Outcome.COMPLETED,
            )
            for i in range(8)
        ]
    )
    return p


def _time_of(p):
    job = JobRequest(partition="cpu", signature="sig", request={"time_s": 7200, "ntasks": 4})
    d = p.decide(job, "ann", 1000)
    (c,) = [c for c in d.changes if c.option == "time"]
    return c.value, d.explain["time"]


def test_the_live_predictor_reads_siblings_in_flight_and_the_budget_scale():
    p = _predictor_with_history()
    assert p.soft_state is not None
    assert _time_of(p)[0] == "00:13:00"  # 1.1 × 590 s and the watcher's 120 s lead: nothing running, scale 1
    job = JobRequest(partition="cpu", signature="sig", request={"time_s": 7200, "ntasks": 4})
    tmpl = p.template_of(job, "ann")
    p.soft_state.set_running({tmpl: (1, 1800.0)})  # a sibling has run 30 min already
    value, ex = _time_of(p)
    # 1.1 × 1800 s = 33 min, times the burst tilt e^(0.2·ln 2) = 1.149 for one sibling in flight: 37.9 min,
    # and the watcher's 2 min lead
    assert value == "00:40:00"
    assert ex["siblings_running"] == 1 and ex["budget_scale"] == pytest.approx(1.0)
    p.soft_state.set_running({})
    for _ in range(40):
        p.soft_state.extended()  # many extensions lately: more room for every job
    assert _time_of(p)[1]["budget_scale"] > 1.5
    assert _time_of(p)[0] > "00:13:00"


def test_a_user_over_their_extension_budget_keeps_their_time_request(store):
    p = _predictor_with_history()
    p.soft_state.store = store  # the live state reads the user's record from harpd's store
    assert _time_of(p)[0] == "00:13:00"  # ann is cut while her jobs stay within harp's limits
    cut = {"changes": [{"option": "time", "value": "11", "old": "120", "reason": "m"}], "limits": {}, "explain": {}}
    for i in range(10):
        store.add_submission(
            str(500 + i),
            1000,
            "ann",
            {},
            Resources(time_s=7200),
            Resources(time_s=660),
            Decision.model_validate(cut),
            verified=True,
        )
        if i < 5:
            store.add_limit_change(str(500 + i), "extend", 660, 1320, "r", "done")
    # a minute later (the per-user figure is cached that long), harpd sees ann's overruns
    assert p.soft_state.user_over_budget("ann", now=__import__("time").time() + 61) == (5, 10)
    job = JobRequest(partition="cpu", signature="sig", request={"time_s": 7200, "ntasks": 4})
    d = p.decide(job, "ann", 1000)
    assert [c for c in d.changes if c.option == "time"] == []
    assert "5 of your last 10 jobs harp cut outgrew its limit" in d.explain["time"]["reason"]
    assert p.soft_state.explain()["users_not_cut"] == ["ann"]


def test_each_listing_gives_the_predictor_the_queue_s_load_and_no_partitions_leaves_it_to_age_out(store, slurm):
    import time

    from harpd.slurm.base import PartitionInfo, SlurmError

    parts = {"cpu": PartitionInfo("cpu", 86400, 64000, 8, 2, node_names=("n1", "n2"))}
    state = SoftState(SoftPolicy(), store, max_age_s=300.0)
    fb = SoftFeedback(store, _Templates(), state, lambda: parts)
    slurm.add("1", used_s=100)  # running
    slurm.add("2", state="PENDING", limit_s=600)
    slurm.add("3", state="PENDING", limit_s=600)
    fb.tick(slurm.queue())
    load = state.queue()
    assert load is not None and (load.pending_jobs, load.running_jobs, load.total_cores) == (2, 1, 16)
    assert load.backlog_core_s == pytest.approx(2 * 600.0 * (slurm.jobs["2"].queued().cpus_per_task or 1))
    assert state.queue(now=time.time() + 301.0) is None  # the watcher stopped listing: no view

    def down() -> dict:
        raise SlurmError("scontrol: no answer")

    failing = SoftFeedback(store, _Templates(), SoftState(SoftPolicy(), store), down)
    assert failing.tick(slurm.queue()) == 0  # the listing is still used for the siblings; the load is absent
    assert failing.state.queue() is None
