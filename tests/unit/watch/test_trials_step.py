"""Convergence-aware trials end to end without Slurm: the progress op (owner checked), the watch step, harp status."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harpd import protocol as p
from harpd.cli.progress_cmd import job_of_env
from harpd.cli.status_cmd import render
from harpd.config import HarpSettings
from harpd.daemon.handlers import Handlers, Peer
from harpd.report.job_status import job_status
from harpd.slurm.base import QueuedJob, SlurmError
from harpd.store import Store
from harpd.watch.trials import TrialStep
from tests.helpers.fake_slurm import FakeSlurm

ALICE = Peer(pid=10, uid=1000, gid=1000, user="alice", groups=frozenset({1000}))
BOB = Peer(pid=11, uid=1001, gid=1001, user="bob", groups=frozenset({1001}))


@pytest.fixture
def store(tmp_path: Path):
    s = Store.open(tmp_path / "harp.db")
    yield s
    s.close()


def progress(h: Handlers, peer: Peer, job: str, value: float, study: str | None = None, metric: str = "loss"):
    body = {"v": 1, "op": "progress", "job_id": job, "metric": metric, "value": value}
    if study is not None:
        body["study"] = study
    return h.handle(peer, p.parse_request(json.dumps(body)))


def test_progress_only_from_slurms_owner_of_a_running_job(store):
    slurm = FakeSlurm()
    slurm.add("7_1", 1000, state="RUNNING")
    slurm.add("7_2", 1000, state="PENDING")
    slurm.add("8", 1000, state="RUNNING")
    h = Handlers(store, slurm=slurm)
    ok = progress(h, ALICE, "7_1", 0.9)
    assert isinstance(ok, p.ProgressAnswer) and ok.study == "array-7" and ok.elapsed_s == 0
    assert "not yours" in progress(h, BOB, "7_1", 0.1).error
    assert "not running" in progress(h, ALICE, "7_2", 0.1).error
    assert "Slurm does not show it" in progress(h, ALICE, "9_9", 0.1).error
    assert "not an array task" in progress(h, ALICE, "8", 0.1).error
    assert "stop=hyperband" in progress(h, ALICE, "8", 0.1, "study=s stop=hyperband").error
    assert isinstance(progress(h, ALICE, "8", 0.5, "study=s stop=sha eta=2"), p.ProgressAnswer)
    assert "no Slurm" in progress(Handlers(store), ALICE, "7_1", 0.1).error
    rows = store.trial_reports()
    assert [(r.job_id, r.uid, r.study) for r in rows] == [("7_1", 1000, "array-7"), ("8", 1000, "s")]
    assert store.trial_studies()[0].policy["stop"] == "sha"
    with pytest.raises(p.ProtocolError):
        p.parse_request(json.dumps({"v": 1, "op": "progress", "job_id": "7_1", "metric": "loss", "value": "nan"}))


class Queue:
    """The watch step's Slurm: a listing, and what was done to which job."""

    def __init__(self, jobs: list[QueuedJob]) -> None:
        self.jobs = jobs
        self.done: list[tuple[str, str]] = []

    def set_nice(self, job_id: str, nice: int) -> None:
        self.done.append((job_id, f"nice {nice}"))

    def hold(self, job_id: str) -> None:
        self.done.append((job_id, "hold"))

    def cancel(self, job_id: str) -> None:
        self.done.append((job_id, "cancel"))


def report(store: Store, job: str, uid: int, study: str, values: list[float], policy=None) -> None:
    """Reports at 0, 30, 60 ... minutes of the trial's run (elapsed written as harpd counts it)."""
    for v in values:
        store.add_trial_report(job, uid, study, "loss", v, policy)
    rows = [r for r in store.trial_reports() if r.job_id == job]
    with store.transaction() as db:
        for i, r in enumerate(rows):
            db.conn.execute("UPDATE trial_reports SET elapsed_s = ? WHERE id = ?", (i * 1800.0, r.id))


def q(job: str, state: str, uid: int = 1000, array: str | None = None) -> QueuedJob:
    return QueuedJob(
        job_id=job,
        state=state,
        user="alice",
        uid=uid,
        array_job_id=array,
        array_task=job.split("_")[1] if "_" in job else None,
    )


def test_watch_step_nices_the_slower_studys_pending_tasks_once(store):
    report(store, "10_0", 1000, "array-10", [1.0, 0.4])  # fast
    report(store, "20_0", 1000, "array-20", [1.0, 0.95])  # slow
    jobs = [
        q("10_0", "RUNNING", array="10"),
        q("10", "PENDING", array="10"),
        q("20_0", "RUNNING", array="20"),
        q("20", "PENDING", array="20"),
        q("30", "PENDING", uid=1001, array="20"),
    ]  # listed under the array but another owner's: never touched
    slurm = Queue(jobs)
    step = TrialStep(store, slurm, HarpSettings())
    step.tick(jobs)
    assert slurm.done == [("20", "nice 1000")]
    step.tick(jobs)
    assert slurm.done == [("20", "nice 1000")]  # recorded, not repeated
    st = store.trial_status("20_3")  # a pending task of the array: the array's action
    assert st.action.nice == 1000 and "rank 2 of 2" in st.action.reason


def test_watch_step_stops_what_successive_halving_drops_in_opted_in_studies(store):
    pol = {"stop": "sha", "eta": 3, "rung_s": 1800.0}
    for i, v in enumerate([0.2, 0.5, 0.6]):
        report(store, f"40_{i}", 1000, "s", [1.0, v], pol)
    jobs = [q("40_0", "RUNNING", array="40"), q("40_1", "RUNNING", array="40"), q("40_2", "PENDING", array="40")]
    slurm = Queue(jobs)
    TrialStep(store, slurm, HarpSettings()).tick(jobs)
    assert sorted(slurm.done) == [("40_1", "cancel"), ("40_2", "hold")]
    TrialStep(store, slurm, HarpSettings()).tick(jobs)
    assert len(slurm.done) == 2
    # another user's study of the same name is not ranked or stopped with alice's
    assert store.trial_actions()["40_1"].uid == 1000


def test_a_refused_slurm_call_is_not_recorded(store):
    report(store, "10_0", 1000, "array-10", [1.0, 0.4])
    report(store, "20_0", 1000, "array-20", [1.0, 0.95])
    jobs = [q("10_0", "RUNNING", array="10"), q("20_0", "RUNNING", array="20"), q("20", "PENDING", array="20")]

    class Refusing(Queue):
        def set_nice(self, job_id: str, nice: int) -> None:
            raise SlurmError("scontrol update: Access/permission denied")

    TrialStep(store, Refusing(jobs), HarpSettings()).tick(jobs)
    assert store.trial_actions() == {}


def test_status_shows_the_trial_to_its_owner_only(store):
    report(store, "40_1", 1000, "s", [1.0, 0.5])
    store.set_trial_action("40_1", 1000, "s", None, True, "cancelled: successive halving (eta=3): ...")
    job = job_status(store, "40_1", admin=False, uid=1000, user="alice")
    text = render(job)
    assert "study s, 2 progress report(s), last loss=0.5 at 30 min" in text and "cancelled: successive" in text
    with pytest.raises(Exception, match="knows no job"):
        job_status(store, "40_1", admin=False, uid=1001, user="bob")


def test_job_id_from_slurms_environment():
    assert job_of_env({"SLURM_JOB_ID": "55", "SLURM_ARRAY_JOB_ID": "50", "SLURM_ARRAY_TASK_ID": "5"}) == "50_5"
    assert job_of_env({"SLURM_JOB_ID": "55"}) == "55"
    assert job_of_env({}) is None
