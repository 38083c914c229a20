"""A run whose owner slurmdbd has not filled in yet is waited for, not refused.

Seen on a loaded machine: harpd logged ``job 224 ran out but is not
recovered: it ran as None, registered by harptest1`` and never recovered it,
although sacct named harptest1 minutes later.
"""

from __future__ import annotations

from resubmit_fakes import fake, store, submission  # noqa: F401 (fixtures)

from harpd.config import HarpSettings
from harpd.ingest.poller import Ingestor
from harpd.records import Outcome
from harpd.recovery import machine as rs


def _set_user(fake, jid, user):
    st = fake.state
    st["jobs"][jid]["user"] = user
    fake._save(st)


def _machine(store, fake, clock=None):
    settings = HarpSettings(ingest={"poll_interval_s": 5}, recovery={"mode": "requeue"})
    ing = Ingestor(store, fake, settings)
    kw = {} if clock is None else {"clock": clock}
    rec = rs.Recovery(store, fake, settings, watch=ing.watch, **kw)
    ing.on_outcome.append(rec.on_outcome)
    return ing, rec


def test_unknown_owner_waits_then_recovers(store, fake):
    ing, rec = _machine(store, fake)
    jid = fake.add_job(user="alice", time_s=60)
    submission(fake, store, jid)
    _set_user(fake, jid, None)  # slurmdbd has not written the owner yet
    fake.end_run(jid, Outcome.TIMEOUT)
    ing.poll_once()
    assert store.get_job(jid).user is None
    assert store.attempts(jid) == []  # not recovered yet ...
    assert jid in store.get_meta(rs.AWAITING_OWNER_KEY)  # ... but waited for
    rec.tick()
    assert store.attempts(jid) == []

    _set_user(fake, jid, "alice")  # the owner arrives
    rec.tick()
    steps = [(a.attempt, a.step) for a in store.attempts(jid)]
    assert steps == [(1, "done"), (2, "requeued")]
    assert store.get_meta(rs.AWAITING_OWNER_KEY) == {}
    rec.tick()
    assert len(fake.calls("requeue_hold")) == 1


def test_owner_that_differs_is_still_refused(store, fake):
    ing, rec = _machine(store, fake)
    jid = fake.add_job(user="alice", time_s=60)
    submission(fake, store, jid, user="mallory", uid=1666)
    _set_user(fake, jid, None)
    fake.end_run(jid, Outcome.TIMEOUT)
    ing.poll_once()
    _set_user(fake, jid, "alice")
    rec.tick()
    assert store.attempts(jid) == [] and fake.calls("requeue_hold") == []
    assert store.get_meta(rs.AWAITING_OWNER_KEY) == {}


def test_owner_never_known_is_given_up_after_the_bound(store, fake):
    now = [1_000_000.0]
    ing, rec = _machine(store, fake, clock=lambda: now[0])
    jid = fake.add_job(user="alice", time_s=60)
    submission(fake, store, jid)
    _set_user(fake, jid, None)
    fake.end_run(jid, Outcome.TIMEOUT)
    ing.poll_once()
    assert jid in store.get_meta(rs.AWAITING_OWNER_KEY)
    now[0] += rs.OWNER_WAIT_S + 1
    rec.tick()
    assert store.get_meta(rs.AWAITING_OWNER_KEY) == {} and store.attempts(jid) == []
