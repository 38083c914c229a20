"""The operations and their authorisation, without a socket."""

from __future__ import annotations

import os

import pytest

from harpd import protocol as p
from harpd.access import resolve_group
from harpd.config import HarpSettings
from harpd.daemon.handlers import AdminActions, Handlers, NoChangePredictor, OutcomeServices, Peer, Predictor
from harpd.ingest.poller import Ingestor
from harpd.records import JobRecord, Outcome
from harpd.slurm.scontrol import job_info
from tests.helpers.fake_slurm import FakeSlurm

ALICE = Peer(pid=10, uid=1000, gid=1000, user="alice", groups=frozenset({1000}))
BOB = Peer(pid=11, uid=1001, gid=1001, user="bob", groups=frozenset({1001, 5000}))
ROOT = Peer(pid=1, uid=0, gid=0, user="root", groups=frozenset({0}))


def req(obj):
    obj.setdefault("v", 1)
    return p.parse_request(__import__("json").dumps(obj))


def register(h, peer, job_id="100", **kw):
    body = {
        "op": "register",
        "job_id": job_id,
        "job": {"partition": "cpu"},
        "original": {"time_s": 7200},
        "submitted": {"time_s": 3600},
        "decision": None,
    }
    body.update(kw)
    return h.handle(peer, req(body))


def test_no_change_predictor_keeps_request_and_reports_limits(store):
    seen = []

    def limits(part):
        seen.append(part)
        return {"partition": part, "max_time_s": 86400, "max_mem_mb": 64000, "max_cpus": 32}

    h = Handlers(store, partition_limits=limits)
    ans = h.handle(ALICE, req({"op": "predict", "job": {"request": {"partition": "gpu", "time_s": 60}}}))
    assert isinstance(ans, p.PredictAnswer)
    assert ans.decision.changes == [] and ans.decision.limits.max_time_s == 86400
    assert seen == ["gpu"]


def test_limits_lookup_failure_still_answers_no_change(store):
    def boom(part):
        raise RuntimeError("slurmctld down")

    ans = Handlers(store, partition_limits=boom).handle(ALICE, req({"op": "predict", "job": {"partition": "x"}}))
    assert isinstance(ans, p.PredictAnswer) and ans.decision.limits.partition == "x"


def test_plugged_predictor_gets_the_kernel_identity(store):
    calls = []

    class Fake:
        name = "fake"

        def decide(self, job, user, uid):
            calls.append((job.job_name, user, uid))
            return p.Decision(
                changes=[p.Change(option="time", value="0-00:30:00", old="0-02:00:00", reason="r")],
                limits=p.Limits(partition="cpu", max_time_s=7200),
                model="fake",
            )

    assert isinstance(Fake(), Predictor)
    h = Handlers(store, predictor=Fake())
    ans = h.handle(BOB, req({"op": "predict", "job": {"job_name": "j"}}))
    assert calls == [("j", "bob", 1001)]
    assert ans.decision.changes[0].value == "0-00:30:00"
    health = h.handle(BOB, req({"op": "health"}))
    assert health.predictor == "fake"


def test_predictor_returning_a_dict_or_garbage(store):
    class DictPredictor:
        def decide(self, job, user, uid):
            return {"changes": [], "limits": {"partition": "p"}, "model": "d", "explain": {}}

    class Garbage:
        def decide(self, job, user, uid):
            return {"changes": [{"option": "rm -rf", "value": 1}]}

    class Crash:
        def decide(self, job, user, uid):
            raise ZeroDivisionError("oops")

    r = req({"op": "predict", "job": {}})
    assert Handlers(store, predictor=DictPredictor()).handle(ALICE, r).decision.model == "d"
    assert "invalid decision" in Handlers(store, predictor=Garbage()).handle(ALICE, r).error
    assert "ZeroDivisionError" in Handlers(store, predictor=Crash()).handle(ALICE, r).error


def test_register_records_the_peer_and_slurm_not_the_message(store):
    slurm = FakeSlurm()
    slurm.add("100", 1000, time_s=3600)
    h = Handlers(store, slurm=slurm)
    assert isinstance(register(h, ALICE), p.RegisterAnswer)
    sub = store.get_submission("100")
    # the message claimed an original of 7200 s: without a decision harpd stores what Slurm holds
    assert sub.uid == 1000 and sub.user == "alice" and sub.verified == 1
    assert sub.submitted.time_s == 3600 and sub.original.time_s == 3600 and sub.decision is None


def test_register_someone_elses_job_is_refused_by_slurm_owner(store):
    slurm = FakeSlurm()
    slurm.add("100", 1000, time_s=3600)
    h = Handlers(store, slurm=slurm)
    ans = register(h, BOB)
    assert isinstance(ans, p.ErrorAnswer) and "not yours" in ans.error
    assert store.get_submission("100") is None
    assert isinstance(register(h, ALICE), p.RegisterAnswer)


def test_root_registers_on_behalf_of_the_owner(store):
    slurm = FakeSlurm()
    slurm.add("100", 65534, time_s=3600)
    h = Handlers(store, slurm=slurm)
    assert isinstance(register(h, ROOT), p.RegisterAnswer)
    sub = store.get_submission("100")
    assert sub.uid == 65534 and sub.user == "nobody"


def test_register_when_slurm_cannot_answer_is_refused_and_stores_nothing(store):
    slurm = FakeSlurm()
    slurm.add("100", 1000, time_s=3600)
    slurm.down = True
    h = Handlers(store, slurm=slurm)
    ans = register(h, ALICE)
    assert isinstance(ans, p.ErrorAnswer) and "cannot ask Slurm about job 100" in ans.error and "try again" in ans.error
    assert store.get_submission("100") is None


def test_register_without_slurm_is_refused(store):
    ans = register(Handlers(store), ALICE)
    assert isinstance(ans, p.ErrorAnswer) and "no Slurm" in ans.error
    assert store.get_submission("100") is None


def test_register_a_job_slurm_does_not_know_is_refused(store):
    h = Handlers(store, slurm=FakeSlurm())
    ans = register(h, BOB, job_id="11")
    assert isinstance(ans, p.ErrorAnswer) and ans.error.startswith("Slurm does not know job 11 yet")
    assert store.get_submission("11") is None


def test_status_only_for_own_jobs(store):
    slurm = FakeSlurm()
    slurm.add("100", 1000, time_s=7200)
    h = Handlers(store, slurm=slurm)
    assert isinstance(register(h, ALICE), p.RegisterAnswer)
    mine = h.handle(ALICE, req({"op": "status", "job_id": "100"}))
    assert isinstance(mine, p.StatusAnswer)
    assert mine.job["uid"] == 1000 and mine.job["state"] == "pending" and mine.job["original"]["time_s"] == 7200
    theirs = h.handle(BOB, req({"op": "status", "job_id": "100"}))
    assert isinstance(theirs, p.ErrorAnswer) and "not yours" in theirs.error
    assert isinstance(h.handle(ROOT, req({"op": "status", "job_id": "100"})), p.StatusAnswer)
    unknown = h.handle(ALICE, req({"op": "status", "job_id": "4242"}))
    assert isinstance(unknown, p.ErrorAnswer) and "knows no job 4242" in unknown.error


def test_status_follows_the_resubmission_chain_and_record(store):
    slurm = FakeSlurm()
    slurm.add("100", 1000, time_s=3600)
    h = Handlers(store, slurm=slurm)
    assert isinstance(register(h, ALICE), p.RegisterAnswer)
    store.add_attempt("100", 1, "100", {"time_s": 3600}, "first", "done")
    store.add_attempt("100", 2, "101", {"time_s": 7200}, "timeout: doubled", "submitted")
    store.insert_jobs([JobRecord(job_id="101", user="alice", outcome=Outcome.COMPLETED, attempt=2)])
    ans = h.handle(ALICE, req({"op": "status", "job_id": "101"}))
    assert ans.job["chain_id"] == "100" and [a["attempt"] for a in ans.job["attempts"]] == [1, 2]
    assert ans.job["record"]["outcome"] == "completed"
    assert isinstance(h.handle(BOB, req({"op": "status", "job_id": "101"})), p.ErrorAnswer)


def test_status_of_an_unregistered_history_job_by_user_name(store):
    store.insert_jobs([JobRecord(job_id="7", user="bob", outcome=Outcome.OOM)])
    h = Handlers(store)
    assert h.handle(BOB, req({"op": "status", "job_id": "7"})).job["outcome"] == "oom"
    assert "not yours" in h.handle(ALICE, req({"op": "status", "job_id": "7"})).error


@pytest.mark.parametrize("op", [{"op": "retrain"}, {"op": "reload"}, {"op": "import", "path": "/etc/hostname"}])
def test_admin_ops_refused_for_users(store, op):
    called = []
    h = Handlers(
        store,
        actions=AdminActions(
            retrain=lambda: called.append(1),
            reload=lambda: called.append(2),
            importer=lambda path, s: called.append(3),
        ),
    )
    ans = h.handle(ALICE, req(dict(op)))
    assert isinstance(ans, p.ErrorAnswer) and "admin operation" in ans.error
    assert called == []
    assert isinstance(h.handle(ROOT, req(dict(op))), p.AdminAnswer)
    assert len(called) == 1


def test_admin_group_membership_grants_admin(store):
    h = Handlers(store, admin_gid=5000, actions=AdminActions(retrain=lambda: {"trained": 3}))
    ans = h.handle(BOB, req({"op": "retrain"}))  # bob has 5000 as a supplementary group
    assert isinstance(ans, p.AdminAnswer) and ans.result == {"trained": 3}
    assert isinstance(h.handle(ALICE, req({"op": "retrain"})), p.ErrorAnswer)


def test_admin_ops_not_available(store):
    h = Handlers(store)
    assert "retrain not available" in h.handle(ROOT, req({"op": "retrain"})).error
    assert "reload not available" in h.handle(ROOT, req({"op": "reload"})).error


def test_reload_runs_the_reload_it_was_given(store):
    class P(NoChangePredictor):
        reloaded = 0

        def reload(self):
            P.reloaded += 1
            return {"models": 2}

    # the daemon passes the live predictor's reload in; a predictor's own method is never probed for
    assert "reload not available" in Handlers(store, predictor=P()).handle(ROOT, req({"op": "reload"})).error
    ans = Handlers(store, predictor=P(), actions=AdminActions(reload=P().reload)).handle(ROOT, req({"op": "reload"}))
    assert ans.result == {"models": 2} and P.reloaded == 1


def test_import_calls_the_importer_with_the_store(store, tmp_path):
    f = tmp_path / "t.swf"
    f.write_text("; empty\n")
    got = []
    h = Handlers(store, actions=AdminActions(importer=lambda path, s: got.append((path, s)) or 17))
    ans = h.handle(ROOT, req({"op": "import", "path": str(f)}))
    assert ans.result == {"count": 17} and got == [(str(f), store)]
    assert "must be absolute" in h.handle(ROOT, req({"op": "import", "path": "t.swf"})).error
    assert "not a readable file" in h.handle(ROOT, req({"op": "import", "path": str(tmp_path / "no")})).error

    def bad(path, s):
        raise ValueError("line 3: not SWF")

    assert (
        "line 3: not SWF"
        in Handlers(store, actions=AdminActions(importer=bad)).handle(ROOT, req({"op": "import", "path": str(f)})).error
    )


def test_import_without_an_importer(store, tmp_path):
    f = tmp_path / "t.swf"
    f.write_text("x")
    assert (
        Handlers(store).handle(ROOT, req({"op": "import", "path": str(f)})).error
        == "import not available in this harpd"
    )


def test_health(store):
    store.save_model("gbm", "time", 10, {}, "/x", champion=True)
    ans = Handlers(store).handle(ALICE, req({"op": "health"}))
    assert ans.store == "ok" and ans.models["time"]["name"] == "gbm" and ans.predictor == "none"
    assert ans.ingest is None  # no poller wired: nothing polled


def test_health_counts_the_pollers_polls(store):
    h = Handlers(store, outcomes=OutcomeServices(ingestor=Ingestor(store, FakeSlurm(), HarpSettings())))
    assert h.handle(ALICE, req({"op": "health"})).ingest == p.IngestHealth(polls=0, failures=0)
    h.ingestor.poll_once()
    h.ingestor.poll_once()
    assert h.handle(ALICE, req({"op": "health"})).ingest.polls == 2


def test_store_failure_is_an_error_answer(store):
    slurm = FakeSlurm()
    slurm.add("100", 1000, time_s=3600)
    h = Handlers(store, slurm=slurm)
    store.close()
    ans = register(h, ALICE)
    assert isinstance(ans, p.ErrorAnswer) and "store unavailable" in ans.error
    assert h.handle(ALICE, req({"op": "health"})).store != "ok"


def test_peer_from_ids_resolves_supplementary_groups():
    peer = Peer.from_ids(123, 0, 0)
    assert peer.user == "root" and 0 in peer.groups
    ghost = Peer.from_ids(1, 4242424, 4242424)
    assert ghost.user == "4242424" and ghost.groups == frozenset({4242424})


def test_resolve_group():
    assert resolve_group(None) is None
    assert resolve_group("root") == 0
    assert resolve_group("4711") == 4711
    with pytest.raises(ValueError, match="no such group"):
        resolve_group("no-such-group-here")


def test_daemon_user_is_admin(store):
    me = Peer(pid=1, uid=os.geteuid(), gid=0, user="me", groups=frozenset())
    assert Handlers(store).is_admin(me)


def test_slurm_owner_not_filled_in_yet_is_refused(store):
    slurm = FakeSlurm()
    slurm.put(job_info({"JobId": "100", "UserId": "(null)", "TimeLimit": "01:00:00"}))
    ans = register(Handlers(store, slurm=slurm), BOB)
    assert isinstance(ans, p.ErrorAnswer) and "has not filled in the owner" in ans.error
    assert store.get_submission("100") is None


def _two_partition_slurm() -> FakeSlurm:
    """Slurm with a cpu and a gpu partition, and alice's job 12 (the owner harpd checks registrations against)."""
    from harpd.slurm.base import PartitionInfo

    slurm = FakeSlurm(
        partitions={
            "cpu": PartitionInfo(
                name="cpu", max_time_s=86400, max_mem_mb_per_node=64000, max_cpus_per_node=32, nodes=4, default=True
            ),
            "gpu": PartitionInfo(name="gpu", max_time_s=3600, max_mem_mb_per_node=None, max_cpus_per_node=8, nodes=1),
        }
    )
    slurm.put(
        job_info(
            {
                "JobId": "12",
                "UserId": "alice(1000)",
                "GroupId": "alice(1000)",
                "TimeLimit": "01:00:00",
                "SubmitTime": "2026-11-23T21:40:01",
            }
        )
    )
    return slurm


def test_backend_adapters_owner_and_cached_limits(store):
    from harpd.slurm.partitions import limits_from_backend

    be = _two_partition_slurm()
    limits = limits_from_backend(be)
    assert limits("gpu").max_time_s == 3600 and limits("gpu").max_mem_mb is None
    assert limits(None).partition == "cpu"  # the default partition
    assert limits("nope") is None
    assert be.partition_calls == 1  # cached
    h = Handlers(store, slurm=be, partition_limits=limits)
    assert "not yours" in register(h, BOB, job_id="12").error
    assert isinstance(register(h, ALICE, job_id="12"), p.RegisterAnswer)
    assert "does not know job 404" in register(h, BOB, job_id="404").error
    assert store.get_submission("404") is None
    ans = h.handle(ALICE, req({"op": "predict", "job": {"partition": "cpu"}}))
    assert ans.decision.limits.max_cpus == 32 and ans.decision.limits.max_mem_mb == 64000
