"""harpd started on a store with imported history and no model trains at once,
in the background, and shows the models in ``health`` when done."""

from __future__ import annotations

import threading

from harpd import protocol as p
from harpd.config import HarpSettings
from harpd.daemon.handlers import Peer
from harpd.daemon.main import build_handlers, build_services
from harpd.daemon.scheduler import Scheduler
from harpd.predict.live import ModelPredictor
from harpd.records import JobRecord, Outcome
from harpd.store import Store
from tests.helpers.wait import wait_for

ROOT = Peer(pid=1, uid=0, gid=0, user="root", groups=frozenset({0}))
U3 = Peer(pid=3, uid=1003, gid=1003, user="u3", groups=frozenset({1003}))  # sig3's owner in the history


def _history(n: int = 1500) -> list[JobRecord]:
    """An imported trace: 20 users, each running one program for about a third of what it asks."""
    t = 1_700_000_000.0
    jobs = []
    for i in range(n):
        u = i % 20
        used = 400.0 * (u + 1) + 20.0 * (i % 7)
        t += 45.0
        jobs.append(
            JobRecord(
                job_id=str(i),
                source="trace",
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
                outcome=Outcome.COMPLETED,
            )
        )
    return jobs


def _health(handlers) -> p.HealthAnswer:
    return handlers.handle(ROOT, p.parse_request('{"op": "health"}'))


def test_harpd_trains_at_start_in_the_background_and_health_shows_it(tmp_path, monkeypatch):
    # no Slurm here (pyslurm is refused): the start-up training runs on its own thread
    # without Slurm harpd is under hard limits: cuts on, so that the history's answer shows
    s = HarpSettings(
        store={"path": str(tmp_path / "harp.db")},
        slurm={"backend": "pyslurm"},
        retrain={"interval_s": 1e9},
        predict={"hard_cut_gain": 1.0},
    )
    store = Store.open(s.store.path)
    store.insert_jobs(_history())
    import harpd.training.champions as training

    real = training.retrain_all
    go = threading.Event()

    def gated(store_, settings_, *a, **kw):
        go.wait(300)  # held until the test has seen harpd answer while training
        return real(store_, settings_, *a, **kw)

    monkeypatch.setattr(training, "retrain_all", gated)
    handlers, services = build_handlers(s, store)
    try:
        # start-up returned while the training waits: requests are answered meanwhile
        assert _health(handlers).models == {}
        ans = handlers.handle(
            U3,
            p.parse_request(
                '{"op": "predict", "job": {"signature": "sig3", "request": {"time_s": 4800, "ntasks": 4}}}'
            ),
        )
        assert ans.ok and ans.decision.model == "history"  # meanwhile: the program's own runs
        go.set()
        wait_for("a time model in health", lambda: "time" in _health(handlers).models, 600, interval=0.1)
        assert _health(handlers).models["time"]["n_train"] >= 1000
        # and the live predictor loaded it: a known habit is right-sized by the model
        wait_for(
            "the model loaded",
            lambda: (
                handlers.handle(
                    U3,
                    p.parse_request(
                        '{"op": "predict", "job": {"signature": "sig3", "request": {"time_s": 4800, "ntasks": 4}}}'
                    ),
                ).decision.model
                not in (None, "history")
            ),
            60,
            interval=0.1,
        )
    finally:
        go.set()
        for svc in services:
            svc.shutdown()
        store.close()


class _QuietSlurm:
    """A Slurm with no finished jobs and no partitions (enough for the poller)."""

    def sacct_jobs(self, job_ids, since, until, all_users):
        return []

    def partitions(self):
        return {}

    def show_job(self, job_id):
        from harpd.slurm.base import JobInfo

        return JobInfo(job_id=job_id)


def test_with_slurm_the_scheduler_trains_at_start_not_a_day_later(tmp_path):
    s = HarpSettings(
        store={"path": str(tmp_path / "harp.db")},
        recovery={"enabled": False},
        retrain={"interval_s": 1e9, "after_n_outcomes": 10**6},
    )
    store = Store.open(s.store.path)
    store.insert_jobs(_history(50))
    trained = threading.Event()
    scheduler = Scheduler()
    live = ModelPredictor(s, store=store)  # no model in the store: the history rule
    assert live.trained_on() is None
    build_services(s, store, _QuietSlurm(), scheduler, trained.set, live=live)
    scheduler.start()
    try:
        assert trained.wait(120), "no training at start"
    finally:
        scheduler.shutdown()
        store.close()
    assert not scheduler.running


def test_an_empty_store_or_a_model_means_no_training_at_start(tmp_path):
    from harpd.daemon.main import _first_training_due

    store = Store.open(tmp_path / "harp.db")
    try:
        assert not _first_training_due(store, lambda: None)  # nothing to learn from
        store.insert_jobs(_history(10))
        assert _first_training_due(store, lambda: None)
        assert not _first_training_due(store, lambda: 5000)  # a model already serves
        assert not _first_training_due(store, None)  # a predictor without models
    finally:
        store.close()
