"""A job id registered before it exists gives its claimant nothing of the owner's job.

Job ids are sequential, so mallory can try to register the next one before
alice's plain ``sbatch`` gets it.  Slurm does not know the job yet, so harpd
refuses the claim and stores nothing; once alice's job exists and ends:

* ``status`` of the id shows mallory no part of alice's run, and alice all of it;
* recovery neither requeues alice's job with new limits nor resubmits
  alice's script as mallory.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "recovery"))
from resubmit_fakes import fake, store, submission  # noqa: F401 (fixtures)

from harpd import protocol as p
from harpd.config import HarpSettings
from harpd.daemon.handlers import Handlers, Peer
from harpd.ingest.poller import Ingestor
from harpd.records import Outcome
from harpd.recovery import machine as rs

ALICE = Peer(pid=10, uid=1000, gid=1000, user="alice", groups=frozenset({1000}))
MALLORY = Peer(pid=20, uid=2000, gid=2000, user="mallory", groups=frozenset({2000}))


def squat(handlers: Handlers, job_id: str) -> None:
    req = p.parse_request(
        '{"op": "register", "job_id": "' + job_id + '", "job": {"harp_lines": ["#HARP retry"], "argv": ["--wrap=id"]},'
        ' "original": {}, "submitted": {}}'
    )
    answer = handlers.handle(MALLORY, req)
    assert isinstance(answer, p.ErrorAnswer) and answer.error.startswith(f"Slurm does not know job {job_id} yet")
    assert handlers.store.get_submission(job_id) is None


@pytest.mark.parametrize("mode", ["requeue", "resubmit"])
def test_a_claimed_job_id_does_not_move_the_owners_job(store, fake, mode) -> None:
    handlers = Handlers(store, slurm=fake)
    next_id = str(fake.state["next_id"])
    squat(handlers, next_id)
    jid = fake.add_job(user="alice", uid=1000)  # alice's plain sbatch gets the id
    assert jid == next_id
    fake.end_run(jid, Outcome.TIMEOUT)

    settings = HarpSettings(ingest={"poll_interval_s": 5}, recovery={"mode": mode})
    ing = Ingestor(store, fake, settings)
    rec = rs.Recovery(store, fake, settings, watch=ing.watch)
    ing.on_outcome.append(rec.on_outcome)
    ing.poll_once()

    assert store.attempts(jid) == []
    moved = [c for c in fake.calls() if c[0] in ("requeue_hold", "update_job", "submit", "release")]
    assert moved == []  # alice's job untouched, nothing submitted as mallory


def test_status_of_a_claimed_job_id_shows_the_claimant_nothing(store, fake) -> None:
    handlers = Handlers(store, slurm=fake)
    jid = str(fake.state["next_id"])
    squat(handlers, jid)
    fake.add_job(user="alice", uid=1000, name="alice-secret-project")
    fake.end_run(jid, Outcome.COMPLETED)
    # before harp learns the job, neither the claimant nor anyone is told it is theirs
    status = p.parse_request(f'{{"op": "status", "job_id": "{jid}"}}')
    assert handlers.handle(MALLORY, status) == p.error(f"harp knows no job {jid}")
    Ingestor(store, fake, HarpSettings(recovery={"enabled": False}, ingest={"learn_all_jobs": True})).poll_once()
    assert store.get_job(jid).user == "alice"

    status = p.parse_request(f'{{"op": "status", "job_id": "{jid}"}}')
    assert handlers.handle(MALLORY, status) == p.error(f"job {jid} is not yours")
    # the owner, by Slurm's record, still sees the run, as does an admin
    assert handlers.handle(ALICE, status).job["record"]["job_name"] == "alice-secret-project"
    root = Peer(pid=1, uid=0, gid=0, user="root", groups=frozenset({0}))
    assert handlers.handle(root, status).job["record"]["user"] == "alice"


def test_once_the_job_exists_only_its_owner_registers_it(store, fake) -> None:
    handlers = Handlers(store, slurm=fake)
    jid = str(fake.state["next_id"])
    squat(handlers, jid)
    fake.add_job(user="alice", uid=1000)
    req = p.parse_request(f'{{"op": "register", "job_id": "{jid}", "job": {{}}, "original": {{}}, "submitted": {{}}}}')
    assert handlers.handle(MALLORY, req) == p.error(f"job {jid} is not yours; register only jobs you submitted")
    assert store.get_submission(jid) is None
    assert handlers.handle(ALICE, req) == p.RegisterAnswer()
    assert store.get_submission(jid).uid == ALICE.uid
