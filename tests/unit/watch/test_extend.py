"""The extender against an in-memory Slurm: when, by how much, exactly once, never past the request."""

from __future__ import annotations

import pytest
from watch_fakes import register, settings, slurm, store, with_predict  # noqa: F401 (fixtures)

from harpd.watch import extend as ex
from harpd.watch.extend import Extender


class Crash(Exception):
    pass


def crash_at(monkeypatch, point):
    def hook(name):
        if name == point:
            raise Crash(name)

    monkeypatch.setattr(ex, "crash_point", hook)


def extender(store, slurm, **predict):
    return Extender(store, slurm, with_predict(settings(), **predict))


def doubling(store, slurm):
    """An extender whose first extension doubles (two allowed): the exactly-once tests below step 1 -> 2 min."""
    return extender(store, slurm, soft_max_extensions=2)


def steps(store, jid):
    return [(r.old_time_s, r.new_time_s, r.step) for r in store.limit_changes(jid)]


def test_extends_by_doubling_up_to_the_request_noting_it_in_the_comment(store, slurm):
    register(store, "7", original_s=600)
    slurm.add("7", limit_s=60, used_s=10, comment="my note")
    e = extender(store, slurm, soft_max_extensions=8)  # doubling all the way
    assert e.tick(slurm.queue()) == 0  # 50 s left: above the 45 s margin
    slurm.jobs["7"].time_used_s = 20
    assert e.tick(slurm.queue()) == 1
    assert slurm.jobs["7"].time_limit_s == 120
    assert slurm.jobs["7"].comment == "my note; harp extended 1 min -> 2 min"
    assert e.tick(slurm.queue()) == 0  # the same crossing: never twice
    limits = []
    for used in (100, 220, 460):
        slurm.jobs["7"].time_used_s = used
        e.tick(slurm.queue())
        limits.append(slurm.jobs["7"].time_limit_s)
    assert limits == [240, 480, 600]  # the last step stops at the user's own request
    slurm.jobs["7"].time_used_s = 580
    assert e.tick(slurm.queue()) == 0 and slurm.jobs["7"].time_limit_s == 600  # never beyond it
    assert steps(store, "7") == [(60, 120, "done"), (120, 240, "done"), (240, 480, "done"), (480, 600, "done")]
    # the comment says what is true now: the last extension's note replaces the earlier ones
    assert slurm.jobs["7"].comment == "my note; harp extended 8 min -> 10 min"


def test_by_default_the_first_extension_goes_straight_to_the_request(store, slurm):
    register(store, "16", original_s=3000)
    slurm.add("16", limit_s=60, used_s=20, comment="mine")
    e = extender(store, slurm)  # the default: one extension, to the user's own request
    assert e.tick(slurm.queue()) == 1 and slurm.jobs["16"].time_limit_s == 3000
    rows = store.limit_changes("16")
    assert [(r.old_time_s, r.new_time_s) for r in rows] == [(60, 3000)]
    assert "back to the requested 50 min (harp extends a job once)" in rows[0].reason
    assert slurm.jobs["16"].comment == "mine; harp extended 1 min -> 50 min"
    slurm.jobs["16"].time_used_s = 2990
    assert e.tick(slurm.queue()) == 0  # the request is the kill time: nothing more to extend
    # a 3-minute partition caps it: the job is extended to the partition's MaxTime, not past it
    register(store, "19", original_s=600)
    slurm.add("19", limit_s=60, used_s=20, partition="tiny")
    assert e.tick(slurm.queue()) == 1 and slurm.jobs["19"].time_limit_s == 180


def test_the_last_extension_goes_straight_to_the_request(store, slurm):
    register(store, "17", original_s=3000)
    slurm.add("17", limit_s=60, used_s=20)
    e = extender(store, slurm, soft_max_extensions=2)  # the second of two goes to the request
    assert e.tick(slurm.queue()) == 1 and slurm.jobs["17"].time_limit_s == 120  # first: doubled
    slurm.jobs["17"].time_used_s = 100
    assert e.tick(slurm.queue()) == 1 and slurm.jobs["17"].time_limit_s == 3000  # second: the user's own request
    rows = store.limit_changes("17")
    assert [(r.old_time_s, r.new_time_s) for r in rows] == [(60, 120), (120, 3000)]
    assert "extension 2 of at most 2: back to the requested 50 min" in rows[1].reason
    slurm.jobs["17"].time_used_s = 2990
    assert e.tick(slurm.queue()) == 0  # the request is the kill time
    # within the partition's MaxTime: a 3-minute partition caps the last extension too
    register(store, "18", original_s=600)
    slurm.add("18", limit_s=60, used_s=20, partition="tiny")
    e.tick(slurm.queue())
    slurm.jobs["18"].time_used_s = 100
    e.tick(slurm.queue())
    assert slurm.jobs["18"].time_limit_s == 180


def test_partition_max_time_caps_the_extension(store, slurm):
    register(store, "8", original_s=600, harp_time="2")
    slurm.add("8", limit_s=120, used_s=100, partition="tiny")
    e = extender(store, slurm)
    e.tick(slurm.queue())
    assert slurm.jobs["8"].time_limit_s == 180
    slurm.jobs["8"].time_used_s = 170
    assert e.tick(slurm.queue()) == 0 and slurm.jobs["8"].time_limit_s == 180


@pytest.mark.parametrize(
    "kw",
    [
        {"harp_time": None},  # harp did not change the time
        {"decision": False},  # no decision at all
        {"original_s": None},  # the user asked for no time
        {"original_s": 60},  # harp's limit is already the request
    ],
)
def test_jobs_harp_did_not_shorten_are_left_alone(store, slurm, kw):
    register(store, "9", **kw)
    slurm.add("9", limit_s=60, used_s=50)
    assert extender(store, slurm).tick(slurm.queue()) == 0
    assert slurm.updates == [] and store.limit_changes("9") == []


def test_unregistered_and_pending_jobs_are_left_alone(store, slurm):
    slurm.add("10", limit_s=60, used_s=50)  # not submitted through harp
    register(store, "11")
    slurm.add("11", state="PENDING", limit_s=60, used_s=0)
    assert extender(store, slurm).tick(slurm.queue()) == 0 and slurm.updates == []


def test_crash_after_the_decision_extends_once_at_restart(store, slurm, monkeypatch):
    register(store, "12")
    slurm.add("12", limit_s=60, used_s=30)
    crash_at(monkeypatch, "extend-decided")
    with pytest.raises(Crash):
        doubling(store, slurm).tick(slurm.queue())
    assert steps(store, "12") == [(60, 120, "decided")] and slurm.updates == []
    monkeypatch.setattr(ex, "crash_point", lambda name: None)
    assert doubling(store, slurm).tick(slurm.queue()) == 1
    assert steps(store, "12") == [(60, 120, "done")] and len(slurm.updates) == 1


def test_crash_after_the_update_is_not_extended_twice(store, slurm, monkeypatch):
    register(store, "13")
    slurm.add("13", limit_s=60, used_s=30, comment="c")
    crash_at(monkeypatch, "extend-updated")
    with pytest.raises(Crash):
        doubling(store, slurm).tick(slurm.queue())
    assert steps(store, "13") == [(60, 120, "decided")] and slurm.jobs["13"].time_limit_s == 120
    monkeypatch.setattr(ex, "crash_point", lambda name: None)
    doubling(store, slurm).tick(slurm.queue())  # 90 s left of 120: not a new crossing
    assert steps(store, "13") == [(60, 120, "done")] and len(slurm.updates) == 1
    assert slurm.jobs["13"].comment == "c; harp extended 1 min -> 2 min"


def test_a_job_that_ended_meanwhile_is_never_extended(store, slurm, monkeypatch):
    register(store, "14")
    slurm.add("14", limit_s=60, used_s=30)
    crash_at(monkeypatch, "extend-decided")
    with pytest.raises(Crash):
        doubling(store, slurm).tick(slurm.queue())
    slurm.jobs["14"].state = "TIMEOUT"  # harpd was down until after the end
    monkeypatch.setattr(ex, "crash_point", lambda name: None)
    assert doubling(store, slurm).tick(slurm.queue()) == 0
    assert steps(store, "14") == [(60, 120, "ended")] and slurm.updates == []


def test_the_job_ending_between_listing_and_update_is_recorded_as_ended(store, slurm):
    register(store, "15")
    slurm.add("15", limit_s=60, used_s=30)
    listing = slurm.queue()
    slurm.jobs["15"].state = "COMPLETED"
    assert doubling(store, slurm).tick(listing) == 0
    assert steps(store, "15") == [(60, 120, "ended")]


def test_a_refusal_is_recorded_and_not_retried(store, slurm):
    register(store, "16")
    slurm.add("16", limit_s=60, used_s=30)
    slurm.update_error = "scontrol update failed (exit 1): Access/permission denied"
    e = extender(store, slurm)
    assert e.tick(slurm.queue()) == 0
    (row,) = store.limit_changes("16")
    assert row.step == "refused" and "permission denied" in row.reason
    e.tick(slurm.queue())
    assert len(slurm.updates) == 1 and slurm.jobs["16"].time_limit_s == 60  # runs into its limit: recovery's turn


def test_a_transient_error_is_retried_while_the_job_runs(store, slurm):
    register(store, "17")
    slurm.add("17", limit_s=60, used_s=30)
    slurm.update_error = (
        "scontrol update gave no answer within 30 s (slurm.command_timeout_s); is slurmctld/slurmdbd up?"
    )
    e = doubling(store, slurm)
    e.tick(slurm.queue())
    assert steps(store, "17") == [(60, 120, "decided")]
    assert e.tick(slurm.queue()) == 1
    assert steps(store, "17") == [(60, 120, "done")] and slurm.jobs["17"].time_limit_s == 120


def test_a_timeout_after_the_update_took_effect_is_not_repeated(store, slurm):
    register(store, "18")
    slurm.add("18", limit_s=60, used_s=30)
    slurm.update_error, slurm.update_error_after = "scontrol update gave no answer within 30 s", True
    e = doubling(store, slurm)
    e.tick(slurm.queue())
    assert e.tick(slurm.queue()) == 0
    assert steps(store, "18") == [(60, 120, "done")] and len(slurm.updates) == 1


# ------------------------------------------------------------ Slurm is asked again before acting


def test_a_job_whose_owner_is_not_the_registered_one_is_left_alone(store, slurm, caplog):
    register(store, "50", original_s=600, uid=1001, user="bob")  # the queue says alice (1000) owns it
    slurm.add("50", limit_s=60, used_s=30)
    extender(store, slurm).tick(slurm.queue())
    assert slurm.jobs["50"].time_limit_s == 60 and slurm.updates == [] and store.limit_changes("50") == []
    assert "owner uid 1000, not the registered uid 1001" in caplog.text


def test_a_limit_someone_else_changed_is_theirs(store, slurm, caplog):
    register(store, "51", original_s=3600)  # harp decided 1 minute
    slurm.add("51", limit_s=120, used_s=100)  # but the job has 2: not the limit harp set
    extender(store, slurm).tick(slurm.queue())
    assert slurm.jobs["51"].time_limit_s == 120 and slurm.updates == []
    assert "not the 60 s harp last set" in caplog.text


def test_an_unverified_registration_is_never_extended(store, slurm, caplog):
    register(store, "52", original_s=3600, verified=False)
    slurm.add("52", limit_s=60, used_s=30)
    e = extender(store, slurm)
    e.tick(slurm.queue())
    e.tick(slurm.queue())
    assert slurm.jobs["52"].time_limit_s == 60 and slurm.updates == []
    assert caplog.text.count("not verified with Slurm") == 1  # said once, not every tick


def test_harps_own_extension_is_the_limit_it_checks_next(store, slurm):
    register(store, "53", original_s=3600)
    slurm.add("53", limit_s=60, used_s=30)
    e = doubling(store, slurm)
    e.tick(slurm.queue())
    first = slurm.jobs["53"].time_limit_s
    assert first > 60
    slurm.jobs["53"].time_used_s = first - 10
    e.tick(slurm.queue())
    assert slurm.jobs["53"].time_limit_s > first  # its own last extension counts as harp's limit
