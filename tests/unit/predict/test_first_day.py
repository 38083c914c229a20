"""The first day: sizing from a program's own runs before any model, and
the retrain trigger that trains at start and soon after the first outcomes."""

from __future__ import annotations

import threading

import pytest

from harpd.config import HarpSettings, RetrainSettings
from harpd.predict.live import ModelPredictor
from harpd.protocol import JobRequest
from harpd.records import JobRecord, Outcome
from harpd.store import Store
from harpd.training import schedule
from harpd.training.schedule import RetrainSchedule, attach_retrain

T0 = 1_700_000_000.0


def _runs(
    n: int,
    used_s: float = 9.0,
    req_s: float = 1800.0,
    rss_mb: float | None = 300.0,
    outcome: Outcome = Outcome.COMPLETED,
    user: str = "alice",
    sig: str = "sig-prog",
    start_id: int = 0,
) -> list[JobRecord]:
    """``n`` finished runs of one program that used ``used_s`` of a ``req_s`` request."""
    out = []
    for i in range(n):
        t = T0 + 100.0 * (start_id + i)
        out.append(
            JobRecord(
                job_id=str(start_id + i),
                source="slurm",
                user=user,
                account="a",
                partition="cpu",
                signature=sig,
                submit_time=t,
                start_time=t,
                end_time=t + used_s,
                used_time_s=used_s,
                req_time_s=req_s,
                req_cpus=1,
                req_mem_mb=8192.0,
                used_mem_mb=rss_mb,
                outcome=outcome,
                censored_time=outcome is Outcome.TIMEOUT,
            )
        )
    return out


@pytest.fixture
def store_of(tmp_path):
    opened: list[Store] = []

    def make(records: list[JobRecord]) -> tuple[HarpSettings, Store]:
        s = HarpSettings(store={"path": str(tmp_path / f"h{len(opened)}.db")}, predict={"hard_cut_gain": 1.0})
        st = Store.open(s.store.path)
        st.insert_jobs(records)
        opened.append(st)
        return s, st

    yield make
    for st in opened:
        st.close()


def _job(req_s: int = 1800, mem_mb: int = 8192, sig: str = "sig-prog") -> JobRequest:
    return JobRequest(partition="cpu", signature=sig, request={"time_s": req_s, "mem_mb": mem_mb})


def _secs(hms: str) -> int:
    parts = [int(x) for x in hms.replace("-", ":").split(":")]
    while len(parts) < 3:
        parts.insert(0, 0)
    h, m, s = parts[-3:]
    return h * 3600 + m * 60 + s


# -- the history rule ----------------------------------------------------------------


def test_no_model_six_runs_of_9s_of_30min_are_right_sized_by_the_history_rule(store_of):
    s, st = store_of(_runs(6))
    assert st.champion("time") is None and st.champion("mem") is None
    d = ModelPredictor(s, store=st).decide(_job(), "alice", 1000)
    opts = {c.option: c for c in d.changes}
    assert "time" in opts, d.explain
    new = _secs(opts["time"].value)
    assert 9 < new < 1800 // 2  # well below the request, above what the runs used
    assert new >= s.predict.floor_time_s
    # the same asymmetric caution as a model's cut: never below the walk-back floor
    assert new >= 1800 * 0.5 ** (s.recovery.max_attempts - 1)
    # the reason says where it came from: the program's own runs, not a model
    assert "own" in opts["time"].reason and "no trained model" in opts["time"].reason
    assert d.explain["time"]["model"] is None and d.explain["time"]["rule"] == "history"
    assert "own runs" in d.explain["reason"] and d.model == "history"
    # memory too: the runs have MaxRSS (300 MB of 8 GB)
    assert "mem" in opts, d.explain
    assert opts["mem"].old == "8G" and opts["mem"].value != "8G"


def test_history_rule_keeps_the_guard_rails(store_of):
    s, st = store_of(_runs(4) + _runs(6, sig="other", start_id=100) + _runs(6, used_s=1790.0, sig="near", start_id=200))
    p = ModelPredictor(s, store=st)
    cold = p.decide(_job(), "alice", 1)  # 4 runs < min_history (5)
    assert cold.changes == [] and "cold start: 4 of 5" in cold.explain["time"]["reason"]
    assert "no trained model yet: request kept" == cold.explain["reason"]
    near = p.decide(_job(sig="near"), "alice", 1)  # 1.1 x 1790 s is above the request: kept
    assert [c for c in near.changes if c.option == "time"] == []
    stranger = p.decide(_job(sig="other"), "bob", 1)  # another user's runs do not count
    assert stranger.changes == []
    no_rss = store_of(_runs(6, rss_mb=None))[1]
    d = ModelPredictor(s, store=no_rss).decide(_job(), "alice", 1)
    assert {c.option for c in d.changes} == {"time"}  # no MaxRSS: memory kept


def test_history_rule_keeps_the_request_after_a_run_hit_its_limit(store_of):
    s, st = store_of(_runs(6) + _runs(1, used_s=1800.0, outcome=Outcome.TIMEOUT, start_id=6))
    d = ModelPredictor(s, store=st).decide(_job(), "alice", 1)
    assert [c for c in d.changes if c.option == "time"] == []
    assert "hit its limit" in d.explain["time"]["reason"]


# -- one training at a time ------------------------------------------------------------


def test_concurrent_retrains_never_overlap(store_of, monkeypatch):
    from harpd.training.trainer import Trainer

    s, st = store_of(_runs(6))
    p = Trainer(ModelPredictor(s, store=st), st, s)
    running, most, calls = [0], [0], [0]
    release = threading.Event()
    lock = threading.Lock()

    def fake_retrain_all(store, settings):
        with lock:
            running[0] += 1
            calls[0] += 1
            most[0] = max(most[0], running[0])
        release.wait(60)
        with lock:
            running[0] -= 1
        return {"time": {"skipped": "fake"}}

    import harpd.training.champions as training

    monkeypatch.setattr(training, "retrain_all", fake_retrain_all)
    outs: list[dict] = []
    threads = [threading.Thread(target=lambda: outs.append(p.retrain())) for _ in range(3)]
    for t in threads:
        t.start()
    release.set()
    for t in threads:
        t.join(60)
    assert len(outs) == 3 and most[0] == 1 and 1 <= calls[0] <= 3


# -- the retrain trigger -----------------------------------------------------------------


class FakeScheduler:
    """Records the job instead of running a clock: the test calls it."""

    def __init__(self) -> None:
        self.jobs: dict[str, object] = {}
        self.kw: dict[str, dict] = {}

    def add_job(self, func, trigger, **kw) -> None:
        assert trigger == "interval" and kw["seconds"] > 0
        self.jobs[kw["id"]] = func
        self.kw[kw["id"]] = kw


def test_store_with_history_and_no_model_trains_at_once():
    calls: list[int] = []
    sched = FakeScheduler()
    attach_retrain(sched, lambda: calls.append(1), RetrainSettings(), trained_on=lambda: None, train_now=True)
    assert sched.kw["harp-retrain"].get("next_run_time") is not None  # first check now, not in a minute
    sched.jobs["harp-retrain"]()  # no outcome yet, no interval passed: due all the same
    assert calls == [1]
    sched.jobs["harp-retrain"]()
    assert calls == [1]


def test_without_train_now_nothing_before_the_interval():
    calls: list[int] = []
    sched = FakeScheduler()
    attach_retrain(sched, lambda: calls.append(1), RetrainSettings(), trained_on=lambda: 100_000)
    assert "next_run_time" not in sched.kw["harp-retrain"]
    sched.jobs["harp-retrain"]()
    assert calls == []


def test_early_trigger_fires_once_after_the_first_outcomes_and_not_again_within_the_gap():
    rs = RetrainSettings(first_after_s=300.0, interval_s=86400.0, after_n_outcomes=500)
    sch = RetrainSchedule(rs, last_trained_at=0.0)
    assert not sch.due(now=1000.0, young=True)  # no outcome: nothing to learn
    sch.note_outcomes(1, now=1000.0)
    sch.note_outcomes(5, now=1010.0)
    assert not sch.due(now=1200.0, young=True)  # the short delay gathers the first outcomes
    assert not sch.due(now=1400.0, young=False)  # an old enough model waits for the day
    assert sch.due(now=1300.0, young=True)
    sch.trained(now=1300.0)
    sch.note_outcomes(1, now=1301.0)
    # not again within the gap, which doubles after each early training in a row
    assert schedule.first_gap_s(rs, sch.early_streak) == 600.0
    assert not sch.due(now=1301.0 + 599.0, young=True)
    assert sch.due(now=1301.0 + 600.0, young=True)
    sch.trained(now=1901.0)
    assert schedule.first_gap_s(rs, sch.early_streak) == 1200.0
    assert schedule.first_gap_s(rs, 40) == rs.interval_s  # the back-off stops at the interval


def test_early_trigger_through_the_scheduler_uses_the_models_size():
    calls: list[int] = []
    size: list[int | None] = [None]
    sched = FakeScheduler()
    rs = RetrainSettings(first_after_s=1e-9, first_below_jobs=5000)
    listener = attach_retrain(sched, lambda: calls.append(1), rs, trained_on=lambda: size[0])
    check = sched.jobs["harp-retrain"]
    check()
    assert calls == []  # no outcome yet
    listener(object())
    threading.Event().wait(0.01)  # the (tiny) delay must pass on the wall clock
    check()
    assert calls == [1]
    check()
    assert calls == [1]  # nothing new since
    size[0] = 100_000  # a model on plenty of jobs: back to the day-long schedule
    listener(object())
    check()
    assert calls == [1]


def test_history_imported_into_a_running_harpd_without_a_model_is_trained_on_soon():
    calls: list[int] = []
    size = [0]
    sched = FakeScheduler()
    rs = RetrainSettings(first_after_s=1e-9)
    attach_retrain(sched, lambda: calls.append(1), rs, trained_on=lambda: None, history_size=lambda: size[0])
    check = sched.jobs["harp-retrain"]
    check()
    assert calls == []  # an empty store: nothing to learn
    size[0] = 3000  # `harp import` through the running harpd: no outcome was announced
    check()
    threading.Event().wait(0.01)  # the (tiny) delay must pass on the wall clock
    check()
    assert calls == [1]
    check()
    assert calls == [1]  # the store did not grow since


def test_a_cut_stopped_by_the_request_floor_says_so(store_of):
    # 20 s runs of a 10-minute request: 1.1 x 20 s would be 22 s, the floor of
    # request/4 (2.5 min -> 3 min) sets the limit, and the reason must name it
    s, st = store_of(_runs(6, used_s=20.0, req_s=600.0))
    d = ModelPredictor(s, store=st).decide(_job(req_s=600), "alice", 1000)
    opts = {c.option: c for c in d.changes}
    assert opts["time"].value == "00:03:00", d.explain
    reason = opts["time"].reason
    assert "1.1 x the most of its last runs" in reason
    assert "the floor of request/4" in reason and "00:02:30" in reason
    # a cut the bound alone sets names no floor
    s2, st2 = store_of(_runs(6, used_s=500.0, req_s=1800.0, start_id=50))
    d2 = ModelPredictor(s2, store=st2).decide(_job(req_s=1800), "alice", 1000)
    time_change = {c.option: c for c in d2.changes}["time"]
    assert "floor" not in time_change.reason, time_change.reason
