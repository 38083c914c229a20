"""Recovery acts only on what Slurm vouches for, at every attempt (#44): owner and submit time.

The takeover of #44: user B made root harpd adopt user A's job V as the
resubmission of B's own chain (a comment that made V look as if it carried
B's marker), after which harpd requeued V and resubmitted A's script and
environment as B.  Each test sets up one step of that with the fake Slurm
and checks that harpd refuses it, and that A's job and registration are
exactly as they were.
"""

from __future__ import annotations

import os
import time

import pytest
from resubmit_fakes import fake, store, submission  # noqa: F401 (fixtures)

from harpd.config import HarpSettings
from harpd.ingest.poller import Ingestor
from harpd.records import Outcome
from harpd.recovery import machine as rs
from harpd.recovery.vouch import why_not_vouched, why_not_vouched_in_accounting
from harpd.slurm.base import JobInfo
from harpd.store import OwnerChanged

T = Outcome.TIMEOUT
ME = os.geteuid()


def machine(store, fake, mode):
    settings = HarpSettings(ingest={"poll_interval_s": 5}, recovery={"mode": mode})
    ing = Ingestor(store, fake, settings)
    rec = rs.Recovery(store, fake, settings, watch=ing.watch)
    ing.on_outcome.append(rec.on_outcome)
    return ing, rec


def test_the_rule():
    info = JobInfo(job_id="7", uid=1000, submit_time=1000.0)
    assert why_not_vouched(info, 1000) is None
    assert "uid 1000's, not the chain owner's (uid 1001)" in why_not_vouched(info, 1001)
    assert why_not_vouched(info, 1000, submitted_after=990.0) is None
    assert "not submitted after the attempt was decided" in why_not_vouched(info, 1000, submitted_after=1100.0)
    assert "not named the owner" in why_not_vouched(JobInfo(job_id="7"), 1000)
    assert "bob's, not the chain owner's (alice)" in why_not_vouched_in_accounting("7", "bob", None, "alice")
    assert why_not_vouched_in_accounting("7", "alice", 1000.0, "alice", 990.0) is None


def test_a_job_carrying_the_marker_that_is_another_users_is_never_adopted(store, fake):
    ing, rec = machine(store, fake, "resubmit")
    chain = fake.add_job(uid=ME, user="me")
    submission(fake, store, chain)
    victim = fake.add_job(uid=ME + 4242, user="victim", comment=f"harp retry 2 of {chain}")
    victim_before = dict(fake.state["jobs"][victim])
    fake.end_run(chain, T)
    ing.poll_once()
    a = store.attempts(chain)
    assert a[1].step == "submitted" and a[1].job_id not in (victim, chain)  # a job of its own, submitted anew
    assert len(fake.calls("submit")) == 1
    assert store.get_submission(victim) is None  # the victim's job was never registered to the chain
    after = dict(fake.state["jobs"][victim])
    assert after["comment"] == victim_before["comment"] and after["restarts"] == victim_before["restarts"]


def test_a_job_carrying_the_marker_submitted_before_the_decision_is_not_adopted(store, fake):
    ing, rec = machine(store, fake, "resubmit")
    chain = fake.add_job(uid=ME, user="me")
    submission(fake, store, chain)
    old = fake.add_job(uid=ME, user="me", comment=f"harp retry 2 of {chain}")
    st = fake.state
    st["jobs"][old]["submitted_at"] = time.time() - 3600  # the owner's own job from an hour ago
    fake._save(st)
    fake.end_run(chain, T)
    ing.poll_once()
    a = store.attempts(chain)
    assert a[1].step == "submitted" and a[1].job_id != old
    assert len(fake.calls("submit")) == 1


def test_a_requeue_stops_when_slurm_names_another_owner(store, fake):
    ing, rec = machine(store, fake, "requeue")
    jid = fake.add_job(uid=1000, user="alice")
    submission(fake, store, jid, uid=1001, user="bob")  # registered by someone it does not belong to
    fake.end_run(jid, T)
    ing.poll_once()
    assert fake.calls("requeue_hold") == [] and fake.calls("submit") == []
    assert fake.state["jobs"][jid]["restarts"] == 0


def test_a_later_attempt_checks_the_owner_again(store, fake):
    """The owner is asked before every attempt's action, not only the chain's first."""
    ing, rec = machine(store, fake, "requeue")
    jid = fake.add_job(uid=ME, user="me")
    submission(fake, store, jid)
    fake.end_run(jid, T)
    ing.poll_once()
    assert [r.step for r in store.attempts(jid)] == ["done", "requeued"]
    st = fake.state
    st["jobs"][jid]["uid"] = ME + 1  # what Slurm now says (a job id harp followed is no longer the owner's)
    st["jobs"][jid]["user"] = "someone"
    fake._save(st)
    fake.end_run(jid, T)
    ing.poll_once()
    a = store.attempts(jid)
    assert len(fake.calls("requeue_hold")) == 1  # the second requeue was refused
    assert a[-1].step == "done" and "not the chain owner's" in (a[-1].limits.get("stop") or "")


def test_a_registration_never_changes_its_owner(store, fake):
    jid = fake.add_job(uid=1000, user="alice")
    submission(fake, store, jid)
    with pytest.raises(OwnerChanged, match=f"job {jid} is registered to uid 1000"):
        submission(fake, store, jid, uid=1001, user="bob")
    assert store.get_submission(jid).uid == 1000 and store.get_submission(jid).user == "alice"
