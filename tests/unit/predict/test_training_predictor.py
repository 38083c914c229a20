"""Training (hold-out, champion, saved models) and the daemon's ModelPredictor."""

from __future__ import annotations

import numpy as np
import pytest

from harpd.config import HarpSettings
from harpd.predict.live import ModelPredictor, make_predictor
from harpd.protocol import JobRequest
from harpd.records import JobRecord, Outcome
from harpd.replay.metric import ModelMetrics
from harpd.store import Store
from harpd.training.champions import pick_champion, train
from harpd.training.schedule import RetrainSchedule, should_retrain


def _records(n=3000, seed=0):
    """20 users with stable habits: each asks 4x what its jobs take (±20%), 1 GiB per job."""
    rng = np.random.default_rng(seed)
    out, t = [], 1_700_000_000.0
    for i in range(n):
        u = int(rng.integers(0, 20))
        used = 300.0 * (u + 1) * rng.uniform(0.8, 1.2)
        t += rng.exponential(60)
        out.append(
            JobRecord(
                job_id=str(i),
                source="syn",
                user=f"u{u}",
                account="a",
                partition="cpu",
                signature=f"sig{u}",
                submit_time=t,
                start_time=t,
                end_time=t + used,
                used_time_s=used,
                req_time_s=1200.0 * (u + 1),
                req_cpus=4,
                req_mem_mb=4096.0,
                used_mem_mb=1024.0 * rng.uniform(0.9, 1.1),
                outcome=Outcome.COMPLETED,
            )
        )
    return out


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    d = tmp_path_factory.mktemp("harp")
    s = HarpSettings(store={"path": str(d / "h.db")}, predict={"hard_cut_gain": 1.0})
    st = Store.open(s.store.path)
    st.insert_jobs(_records())
    res = {r: train(st, s, r) for r in ("time", "mem")}
    yield s, st, res
    st.close()


def test_train_saves_every_candidate_and_one_champion(trained):
    s, st, res = trained
    r = res["time"]
    assert r.skipped is None and r.n_jobs == 3000
    names = {m["name"] for m in r.models}
    assert {"request", "tsafrir", "alea", "gbm", "harp"} <= names
    rows = [m for m in st.models() if m.resource == "time"]
    assert sum(m.champion for m in rows) == 1
    champ = st.champion("time")
    assert champ.name == r.champion and champ.score["under_rate"] <= 0.05
    # on learnable habits a model beats the users' own 4x requests
    assert r.champion != "request"


def test_predictor_shrinks_a_known_habit(trained):
    s, st, _ = trained
    p = ModelPredictor(s, store=st)
    job = JobRequest(partition="cpu", signature="sig9", request={"time_s": 12000, "ntasks": 4, "mem_mb": 4096})
    d = p.decide(job, "u9", 1000)
    opts = {c.option: c for c in d.changes}
    assert "time" in opts, d.explain
    c = opts["time"]
    assert c.old == "03:20:00"
    h, m, sec = (int(x) for x in c.value.split(":"))
    new = h * 3600 + m * 60 + sec
    assert 3000 * 1.2 <= new < 12000  # above what such jobs use, below the 4x request
    assert d.model and "n_history" in d.explain["time"]


def test_predictor_guard_rails(trained):
    s, st, _ = trained
    p = ModelPredictor(s, store=st)
    cold = p.decide(JobRequest(request={"time_s": 3600, "ntasks": 4}), "stranger", 1)
    assert cold.changes == [] and "cold start" in cold.explain["time"]["reason"]
    noreq = p.decide(JobRequest(signature="sig3", request={"ntasks": 4}), "u3", 1)
    assert all(c.option != "time" for c in noreq.changes)
    assert "no time request" in noreq.explain["time"]["reason"]
    # a partition limit below the bound caps the value
    capped = ModelPredictor(s, store=st, limits=lambda part: {"partition": part, "max_time_s": 600})
    d = capped.decide(JobRequest(partition="cpu", signature="sig9", request={"time_s": 12000, "ntasks": 4}), "u9", 1)
    assert d.limits.max_time_s == 600
    for c in d.changes:
        if c.option == "time":
            assert c.value == "00:10:00"


def test_mem_per_cpu_is_changed_in_its_own_option(trained):
    s, st, res = trained
    p = ModelPredictor(s, store=st)
    job = JobRequest(partition="cpu", signature="sig9", request={"time_s": 12000, "ntasks": 4, "mem_per_cpu_mb": 1024})
    d = p.decide(job, "u9", 1)
    mem = [c for c in d.changes if c.option.startswith("mem")]
    if res["mem"].champion not in (None, "request") and mem:
        assert mem[0].option == "mem-per-cpu" and mem[0].old == "1G"


def test_no_model_means_no_change(tmp_path):
    s = HarpSettings(store={"path": str(tmp_path / "e.db")}, predict={"hard_cut_gain": 1.0})
    st = Store.open(s.store.path)
    p = make_predictor(settings=s, store=st)
    d = p.decide(JobRequest(request={"time_s": 3600}), "u", 1)
    assert d.changes == [] and "no trained model" in d.explain["reason"]
    st.close()


def test_too_little_history_is_skipped(tmp_path):
    s = HarpSettings(store={"path": str(tmp_path / "s.db")}, predict={"hard_cut_gain": 1.0})
    st = Store.open(s.store.path)
    st.insert_jobs(_records(200))
    r = train(st, s, "time")
    assert r.skipped and "need 1000" in r.skipped and r.champion is None
    st.close()


def _m(name, score, under):
    return ModelMetrics(name, 100, 0, under, 0, 0, 1, 0, None, 1, None, 0, score)


def test_pick_champion():
    ms = [_m("request", 1.0, 0.0), _m("eager", 0.5, 0.2), _m("harp", 0.8, 0.03)]
    assert pick_champion(ms, 0.05) == "harp"  # eager is over its miss budget
    assert pick_champion([_m("request", 1.0, 0.0), _m("harp", 1.1, 0.03)], 0.05) == "request"
    assert pick_champion([_m("a", 2.0, 0.3), _m("b", 1.0, 0.2)], 0.05) == "b"


def test_retrain_schedule():
    class R:
        interval_s, after_n_outcomes = 100.0, 10

    assert should_retrain(None, 0, 0, R)
    assert not should_retrain(0.0, 50.0, 9, R)
    assert should_retrain(0.0, 50.0, 10, R) and should_retrain(0.0, 100.0, 0, R)
    sch = RetrainSchedule(R, last_trained_at=0.0)
    sch.note_outcomes(4)
    assert not sch.due(now=10.0)
    sch.note_outcomes(6)
    assert sch.due(now=10.0)
    sch.trained(now=10.0)
    assert not sch.due(now=20.0) and sch.new_outcomes == 0


def test_the_queue_rule_reads_the_watchers_listing_and_the_daemons_one_partitions_cache(tmp_path):
    from harpd.slurm.partitions import cached_partitions
    from harpd.watch.feedback import SoftFeedback
    from tests.helpers.fake_slurm import FakeSlurm

    s = HarpSettings(store={"path": str(tmp_path / "q.db")})  # the rule is on by default
    st = Store.open(s.store.path)
    fake = FakeSlurm()
    shared = cached_partitions(fake)
    p = make_predictor(settings=s, store=st, backend=fake, partitions=shared, soft_limits=True)
    assert p.soft_state is not None and p._queue_view(0.0) is None  # no listing yet: decided as without the rule
    SoftFeedback(st, p, p.soft_state, shared).tick(fake.queue())  # the watcher's tick

    def no_squeue() -> list:
        raise AssertionError("a decision listed the queue itself")

    fake.queue = no_squeue  # type: ignore[method-assign]
    assert p._queue_view(0.0) is not None and p._limits is not None and p._limits(None) is not None
    assert fake.partition_calls == 1  # the queue's processors and the partition limits: one scontrol, cached
    # with the setting off, or under hard limits, harpd never weighs a cut against the queue
    off = HarpSettings(store={"path": str(tmp_path / "q.db")}, predict={"queue_rule": False})
    q = make_predictor(settings=off, store=st, backend=fake, partitions=shared, soft_limits=True)
    assert q.soft_state is not None
    q.soft_state.set_queue(p.soft_state.queue())  # type: ignore[arg-type]
    assert q._queue_view(0.0) is None
    assert make_predictor(settings=s, store=st, backend=fake, partitions=shared)._queue_view(0.0) is None
    st.close()
