"""Registrations bound to harpd's recorded decision and checked against Slurm, hostile inputs first.

Each test plays one way a client could try to make harpd act on its word:
a forged original request, a token from another user, a token used twice,
a job whose limits are not the decision's, a job submitted before the
decision, an id Slurm does not know yet.  The fake slurmctld
(tests/helpers/fake_slurm.py) answers as the CLI backend does; the same
attacks run against a real Slurm in tests/slurm/test_trust_adversarial.py.
"""

from __future__ import annotations

import json
import time

import pytest

from harp_submit import registration as client_registration
from harpd import protocol as p
from harpd.daemon.adopt import Adopter
from harpd.daemon.handlers import Handlers, Peer
from harpd.daemon.registration import decided_resources, token_in_comment
from harpd.protocol import Change, Decision, Limits, Resources
from tests.helpers.fake_slurm import FakeSlurm

ALICE = Peer(pid=10, uid=1000, gid=1000, user="alice", groups=frozenset({1000}))
BOB = Peer(pid=11, uid=1001, gid=1001, user="bob", groups=frozenset({1001}))
ROOT = Peer(pid=1, uid=0, gid=0, user="root", groups=frozenset({0}))


class CutTo10Minutes:
    """A predictor that shortens every job to 10 minutes and memory to 1 GB."""

    def decide(self, job, user, uid):
        return Decision(
            changes=[
                Change(option="time", value="10", old="60", reason="model"),
                Change(option="mem", value="1024M", old="4G", reason="model"),
            ],
            limits=Limits(partition="short"),
            model="cut",
        )


def req(obj):
    obj.setdefault("v", 1)
    return p.parse_request(json.dumps(obj))


def predict(h, peer, time_s=3600, mem_mb=4096):
    ans = h.handle(
        peer, req({"op": "predict", "job": {"partition": "short", "request": {"time_s": time_s, "mem_mb": mem_mb}}})
    )
    assert isinstance(ans, p.PredictAnswer) and ans.token
    return ans.token


def register(h, peer, job_id, token, *, original_time_s=3600, decision=None):
    """A register message whose figures are the client's claim (harpd must not believe them)."""
    return h.handle(
        peer,
        req(
            {
                "op": "register",
                "job_id": job_id,
                "job": {"partition": "short", "argv": ["x.sh"]},
                "original": {"time_s": original_time_s},
                "submitted": {"time_s": 600},
                "decision": decision,
                "token": token,
            }
        ),
    )


@pytest.fixture
def world(store):
    slurm = FakeSlurm()
    return store, slurm, Handlers(store, predictor=CutTo10Minutes(), slurm=slurm)


def test_predict_records_the_decision_under_a_fresh_token(world):
    store, _, h = world
    t1, t2 = predict(h, ALICE), predict(h, ALICE)
    assert t1 != t2 and len(t1) >= 22
    row = store.get_decision(t1)
    assert row.uid == 1000 and row.user == "alice" and row.job_id is None
    assert row.job["request"]["time_s"] == 3600
    assert row.decided["time_s"] == 600 and row.decided["mem_mb"] == 1024
    assert abs(row.decided_at - time.time()) < 60


def test_registration_stores_harpds_record_not_the_message(world):
    store, slurm, h = world
    token = predict(h, ALICE, time_s=3600)
    slurm.add("20", 1000, time_s=600, mem_mb=1024)
    # the message claims an original of 10 hours and no decision: harpd's record wins
    assert isinstance(register(h, ALICE, "20", token, original_time_s=36000), p.RegisterAnswer)
    sub = store.get_submission("20")
    assert sub.verified == 1 and sub.token == token
    assert sub.original.time_s == 3600 and sub.submitted.time_s == 600
    assert [c["option"] for c in sub.stored["decision"]["changes"]] == ["time", "mem"]
    assert sub.job["argv"] == ["x.sh"]  # how sbatch ran it is the owner's to tell (recovery resubmits it)
    assert store.get_decision(token).job_id == "20"


def test_forged_original_on_a_plain_sbatch_job_is_refused(world):
    store, slurm, h = world
    token = predict(h, BOB, time_s=3600)  # a decision to cut 60 -> 10 minutes
    slurm.add("9", 1001, time_s=120, mem_mb=1024)  # but the job went in with plain sbatch --time=2
    ans = register(h, BOB, "9", token, original_time_s=3600)
    assert isinstance(ans, p.ErrorAnswer) and "neither harp's decision nor your request" in ans.error
    assert store.get_submission("9") is None and store.get_decision(token).job_id is None


def test_a_token_from_another_user_is_refused(world):
    store, slurm, h = world
    token = predict(h, ALICE)
    slurm.add("21", 1001, time_s=600, mem_mb=1024)
    ans = register(h, BOB, "21", token)
    assert isinstance(ans, p.ErrorAnswer) and "not issued to the job's owner" in ans.error
    assert store.get_submission("21") is None


def test_a_token_binds_one_job_once(world):
    store, slurm, h = world
    token = predict(h, ALICE)
    slurm.add("22", 1000, time_s=600, mem_mb=1024)
    slurm.add("23", 1000, time_s=600, mem_mb=1024)
    assert isinstance(register(h, ALICE, "22", token), p.RegisterAnswer)
    again = register(h, ALICE, "23", token)
    assert isinstance(again, p.ErrorAnswer) and "already used by job 22" in again.error
    assert store.get_submission("23") is None
    # the same job again (a retry after a lost answer) is fine
    assert isinstance(register(h, ALICE, "22", token), p.RegisterAnswer)


def test_an_unknown_token_is_refused(world):
    store, slurm, h = world
    slurm.add("24", 1000, time_s=600, mem_mb=1024)
    ans = register(h, ALICE, "24", "A" * 22)
    assert isinstance(ans, p.ErrorAnswer) and "no decision with that token" in ans.error
    assert store.get_submission("24") is None


def test_a_malformed_token_is_a_protocol_error(world):
    _, _, h = world
    with pytest.raises(p.ProtocolError, match="token"):
        req({"op": "register", "job_id": "1", "job": {}, "original": {}, "submitted": {}, "token": "x;y"})


def test_a_job_submitted_before_the_decision_is_refused(world):
    store, slurm, h = world
    slurm.add("25", 1000, time_s=600, mem_mb=1024, submit_time=time.time() - 3600)
    token = predict(h, ALICE)
    ans = register(h, ALICE, "25", token)
    assert isinstance(ans, p.ErrorAnswer) and "submitted before harpd's decision" in ans.error
    assert store.get_submission("25") is None


def test_a_job_id_slurm_does_not_know_yet_is_refused(world):
    store, _, h = world
    token = predict(h, BOB)
    for jid in ("11", "12", "13"):
        ans = register(h, BOB, jid, token)
        assert isinstance(ans, p.ErrorAnswer) and ans.error.startswith(f"Slurm does not know job {jid} yet")
        assert store.get_submission(jid) is None
    assert store.get_decision(token).job_id is None


def test_the_job_as_the_user_wrote_it_is_registered_without_harps_decision(world):
    store, slurm, h = world
    token = predict(h, ALICE, time_s=3600, mem_mb=4096)
    slurm.add("26", 1000, time_s=3600, mem_mb=4096)  # sbatch refused harp's change: the original went in
    assert isinstance(register(h, ALICE, "26", token), p.RegisterAnswer)
    sub = store.get_submission("26")
    assert sub.decision is None and sub.submitted.time_s == 3600 and sub.verified == 1


def test_root_registers_with_the_owners_token_only(world):
    store, slurm, h = world
    token = predict(h, ALICE)
    slurm.add("27", 1000, time_s=600, mem_mb=1024)
    assert isinstance(register(h, ROOT, "27", token), p.RegisterAnswer)
    assert store.get_submission("27").uid == 1000
    root_token = predict(h, ROOT)
    slurm.add("28", 1000, time_s=600, mem_mb=1024)
    assert "not issued to the job's owner" in register(h, ROOT, "28", root_token).error


def test_slurm_down_refuses_and_keeps_the_token_unused(world):
    store, slurm, h = world
    token = predict(h, ALICE)
    slurm.add("29", 1000, time_s=600, mem_mb=1024)
    slurm.down = True
    assert "try again" in register(h, ALICE, "29", token).error
    slurm.down = False
    assert isinstance(register(h, ALICE, "29", token), p.RegisterAnswer)


# ------------------------------------------------------------------ the token in the comment


def test_token_in_comment_keeps_users_and_snakemakes_comment():
    token = "Abc_def-0123456789xyzQ"
    assert client_registration.with_token(None, token) == f"harp decision {token}"
    mixed = client_registration.with_token("rule_align_wildcards_sample=A", token)
    assert mixed.startswith("rule_align_wildcards_sample=A; ")
    assert token_in_comment(mixed) == token
    assert token_in_comment(f"{mixed}; harp extended 0:10:00 -> 0:20:00") == token
    assert token_in_comment("harp decision short") is None and token_in_comment(None) is None
    assert token_in_comment("my comment harp decision " + token) is None  # only a part of its own


def test_comment_argv_goes_after_the_users_options():
    argv = ["--comment=mine", "-t", "10", "job.sh", "arg"]
    out = client_registration.comment_argv(argv, 3, None, "mine", "T" * 22)
    assert out == ["--comment=mine", "-t", "10", f"--comment=mine; harp decision {'T' * 22}", "job.sh", "arg"]


def test_adopter_registers_a_job_whose_message_was_lost(world):
    store, slurm, h = world
    token = predict(h, ALICE)
    slurm.add("30", 1000, time_s=600, mem_mb=1024, comment=client_registration.with_token("mine", token))
    assert Adopter(store, slurm).tick() == 1
    sub = store.get_submission("30")
    assert sub.uid == 1000 and sub.verified == 1 and sub.original.time_s == 3600
    assert Adopter(store, slurm).tick() == 0  # once
    # its own message arriving late is accepted as the same registration
    assert isinstance(register(h, ALICE, "30", token), p.RegisterAnswer)


def test_adopter_refuses_a_copied_token(world):
    store, slurm, h = world
    token = predict(h, ALICE)
    # bob copies alice's token into his own job's comment
    slurm.add("31", 1001, time_s=600, mem_mb=1024, comment=client_registration.with_token(None, token))
    assert Adopter(store, slurm).tick() == 0
    assert store.get_submission("31") is None and store.get_decision(token).job_id is None


def test_adopter_asks_slurm_nothing_without_waiting_decisions(store):
    slurm = FakeSlurm()
    assert Adopter(store, slurm).tick() == 0
    assert slurm.listings == 0


def test_adopter_lists_nothing_for_decisions_that_changed_nothing(store):
    # an unchanged job carries no token in its comment: its decision is never looked for in the queue
    h = Handlers(store, predictor=None, slurm=FakeSlurm())
    ans = h.handle(ALICE, req({"op": "predict", "job": {"partition": "short", "request": {"time_s": 3600}}}))
    assert isinstance(ans, p.PredictAnswer) and ans.token and not ans.decision.changes
    slurm = FakeSlurm()
    assert Adopter(store, slurm).tick() == 0
    assert slurm.listings == 0 and store.get_decision(ans.token).job_id is None


def test_adopter_forgets_old_unclaimed_decisions(world):
    store, slurm, h = world
    token = predict(h, ALICE)
    later = time.time() + 2 * 86400
    assert Adopter(store, slurm, clock=lambda: later).tick() == 0
    assert store.get_decision(token) is None


def test_decided_resources_applies_the_changes():
    got = decided_resources(
        p.Resources(time_s=3600, mem_per_cpu_mb=2048, cpus_per_task=4),
        Decision(
            changes=[
                Change(option="time", value="0:30:00"),
                Change(option="mem", value="2G"),
                Change(option="cpus-per-task", value="2"),
            ]
        ),
    )
    assert (got.time_s, got.mem_mb, got.mem_per_cpu_mb, got.cpus_per_task) == (1800, 2048, None, 2)


# ------------------------------------------------------------------ harp status


def status(h, peer, job_id):
    return h.handle(peer, req({"op": "status", "job_id": job_id}))


def test_status_the_live_registration_wins_over_an_imported_row_with_the_same_id(world):
    from harpd.records import JobRecord, Outcome

    store, slurm, h = world
    store.insert_jobs([JobRecord(job_id="40", user="bob", source="other-site", outcome=Outcome.COMPLETED)])
    token = predict(h, ALICE)
    slurm.add("40", 1000, time_s=600, mem_mb=1024)
    assert isinstance(register(h, ALICE, "40", token), p.RegisterAnswer)
    mine = status(h, ALICE, "40")  # not polled yet: only the imported row of another job holds id 40
    assert isinstance(mine, p.StatusAnswer) and mine.job["uid"] == 1000 and mine.job["record"] is None
    assert status(h, BOB, "40").error == "job 40 is not yours"


def test_status_tells_not_yours_from_no_such_job(world):
    store, slurm, h = world
    token = predict(h, ALICE)
    slurm.add("41", 1000, time_s=600, mem_mb=1024)
    register(h, ALICE, "41", token)
    assert status(h, BOB, "41").error == "job 41 is not yours"
    assert status(h, BOB, "4242").error == "harp knows no job 4242"
    # a refused claim leaves nothing that could answer "not yours" to the real owner later
    register(h, BOB, "42", predict(h, BOB))
    assert status(h, ALICE, "42").error == "harp knows no job 42"


def test_status_ignores_a_claim_slurm_never_vouched_for(store):
    store.add_submission(
        "43", 1001, "bob", {}, Resources(time_s=60), Resources(time_s=60), None
    )  # a row from before the checks
    h = Handlers(store, slurm=FakeSlurm())
    assert status(h, ALICE, "43").error == "harp knows no job 43"


# ------------------------------------------------------------------ one user's extension budget


def test_a_user_over_their_extension_budget_is_no_longer_cut(store):
    from harpd.predict.soft import SoftPolicy
    from harpd.predict.soft_state import SoftState

    cut = {"changes": [{"option": "time", "value": "10", "old": "60", "reason": "m"}], "limits": {}, "explain": {}}
    for i in range(20):
        store.add_submission(
            str(100 + i),
            1001,
            "bob",
            {},
            Resources(time_s=3600),
            Resources(time_s=600),
            Decision.model_validate(cut),
            verified=True,
        )
        store.add_submission(
            str(200 + i),
            1000,
            "alice",
            {},
            Resources(time_s=3600),
            Resources(time_s=600),
            Decision.model_validate(cut),
            verified=True,
        )
        if i < 12:  # 12 of bob's 20 outgrew harp's limit; 2 of alice's
            store.add_limit_change(f"{100 + i}_1" if i % 2 else str(100 + i), "extend", 600, 1200, "r", "done")
        if i < 2:
            store.add_limit_change(str(200 + i), "extend", 600, 1200, "r", "done")
    # an unverified claim and a job harp left alone do not count
    store.add_submission(
        "300",
        1000,
        "alice",
        {},
        Resources(time_s=60),
        Resources(time_s=60),
        Decision.model_validate(cut),
    )
    assert store.user_extensions("bob") == (20, 12) and store.user_extensions("alice") == (20, 2)
    state = SoftState(SoftPolicy(user_extension_budget=0.3), store)
    assert state.user_over_budget("bob") == (12, 20)
    assert state.user_over_budget("alice") is None
    assert state.explain()["users_not_cut"] == ["bob"]
    few = SoftState(SoftPolicy(user_extension_budget=0.3), store)
    assert few.user_over_budget("carol") is None  # no jobs: nothing to judge
    # and the report says so, for the user and for an admin asking about them
    from harpd.config import HarpSettings
    from harpd.report import build

    settings = HarpSettings()
    window = build.window_of(settings, "all", None)
    for who in ("bob", "bob,alice"):
        notes = build.build(store, settings, by="user", window=window, user=who, source="test").notes
        assert [n for n in notes if "keeps" in n] == [
            "harp keeps bob's own time requests: 12 of their last 20 harp-cut jobs outgrew harp's limit "
            "(budget 30%, predict.soft_user_extension_budget)"
        ]
    notes = build.build(store, settings, by="user", window=window, user="alice", source="test").notes
    assert not [n for n in notes if "keeps" in n]


def test_a_claimed_harp_change_without_a_token_is_refused(world):
    store, slurm, h = world
    slurm.add("44", 1001, time_s=120)
    claimed = {"changes": [{"option": "time", "value": "2", "old": "60", "reason": "x"}], "limits": {}}
    ans = register(h, BOB, "44", None, original_time_s=3600, decision=claimed)
    assert isinstance(ans, p.ErrorAnswer) and "needs the token harpd gave" in ans.error
    assert store.get_submission("44") is None


def test_a_decision_harpd_cannot_record_keeps_the_request(world, monkeypatch):
    from harpd.store import StoreError

    store, _, h = world

    def broken(*a, **kw):
        raise StoreError("harp.db: store is read-only")

    monkeypatch.setattr(store, "add_decision", broken)
    ans = h.handle(ALICE, req({"op": "predict", "job": {"request": {"time_s": 3600}}}))
    assert isinstance(ans, p.PredictAnswer) and ans.token is None and ans.decision.changes == []
    assert "store unavailable" in ans.decision.explain["reason"]
