"""The re-sizer reads the limits ledger: it never undoes recovery, and a failure lifts pending siblings (#45)."""

from __future__ import annotations

import logging
import time

from watch_fakes import register, settings, slurm, store  # noqa: F401 (fixtures)

from harpd.records import JobRecord, Outcome
from harpd.watch.resize import Fresh, Resizer


def mem_resizer(store, slurm, mb):
    return Resizer(store, slurm, settings(resize_min_ratio=0.1, resize_min_s=300), lambda sub: Fresh(None, "mem", mb))


def run(job_id, outcome, mem_mb, *, used_mb=None, end=None, attempt=1, signature="sig-a"):
    end = time.time() - 100 if end is None else time.time() - 1000 + end
    return JobRecord(
        job_id=job_id,
        outcome=outcome,
        signature=signature,
        req_mem_mb=mem_mb,
        used_mem_mb=used_mb,
        req_time_s=180,
        used_time_s=30,
        submit_time=end - 60,
        end_time=end,
        attempt=attempt,
    )


def test_recovery_doubled_job_53_and_the_resizer_does_not_shrink_it_back(store, slurm, caplog):
    """The issue's sequence: attempt 3 requeued at 2000M, the re-sizer's 541M is refused with one log line."""
    register(store, "53", original_s=600, harp_time="3", original_mem_mb=2000, harp_mem="541M")
    store.add_attempt("53", 1, "53", {"time_s": 180, "mem_mb": 541}, "first run", "done")
    store.add_attempt(
        "53", 2, "53", {"time_s": 180, "mem_mb": 1082, "mode": "requeue", "escalated": "mem"}, "ran out of mem", "done"
    )
    store.add_attempt(
        "53", 3, "53", {"time_s": 180, "mem_mb": 2000, "mode": "requeue", "escalated": "mem"}, "ran out of mem", "done"
    )
    slurm.add("53", state="PENDING", limit_s=180, mem_mb=2000)
    r = mem_resizer(store, slurm, 541)
    caplog.set_level(logging.INFO, "harpd.watch")
    for _ in range(3):  # every tick: refused, said once
        r.on_outcome(run("52", Outcome.COMPLETED, 2000, used_mb=400))
        assert r.tick(slurm.queue()) == 0
    assert slurm.jobs["53"].mem_mb == 2000 and slurm.updates == []
    said = [m.getMessage() for m in caplog.records if "53" in m.getMessage()]
    assert said == [
        "job 53: not re-sized: re-size 2000M -> 541M refused: it conflicts with the newer escalation of "
        "attempt 3 to 2000M (ran out of mem)"
    ]
    assert store.limit_changes("53") == []


def test_a_lower_size_never_goes_below_what_a_failure_of_the_task_established(store, slurm):
    """No escalation of its own, but a sibling ran out at 1082M: the 541M re-size becomes a lift above it."""
    register(store, "60", original_s=600, harp_time="3", original_mem_mb=4000, harp_mem="800M")
    slurm.add("60", state="PENDING", limit_s=180, mem_mb=800)
    store.insert_jobs([run("59", Outcome.OOM, 1082)])
    r = mem_resizer(store, slurm, 541)
    r.on_outcome(run("59", Outcome.OOM, 1082))
    assert r.tick(slurm.queue()) == 1
    assert slurm.jobs["60"].mem_mb == 2164  # recovery's next size after 1082M, within the 4000M asked
    (row,) = store.limit_changes("60")
    assert (row.kind, row.old_mem_mb, row.new_mem_mb, row.attempt) == ("lift-mem", 800, 2164, 1)
    assert "job 59 ran out of mem at 1082M" in row.reason


def test_an_oom_lifts_pending_siblings_at_once_never_above_the_request(store, slurm):
    for jid in ("71", "72"):
        register(store, jid, original_s=600, harp_time="3", original_mem_mb=2000, harp_mem="541M")
        slurm.add(jid, state="PENDING", limit_s=180, mem_mb=541)
    register(store, "73", original_s=600, harp_time="3", original_mem_mb=2000, harp_mem="541M", signature="sig-b")
    slurm.add("73", state="PENDING", limit_s=180, mem_mb=541)
    oom = run("70", Outcome.OOM, 1082)
    store.insert_jobs([oom])
    r = mem_resizer(store, slurm, None)  # the predictor gives no change at all: the floor still lifts
    r.on_outcome(oom)
    assert r.tick(slurm.queue()) == 2
    assert slurm.jobs["71"].mem_mb == slurm.jobs["72"].mem_mb == 2000  # min(2 x 1082, the request)
    assert slurm.jobs["73"].mem_mb == 541  # another rule: not a sibling


def test_a_later_completion_below_the_failure_releases_its_floor(store, slurm):
    register(store, "81", original_s=600, harp_time="3", original_mem_mb=4000, harp_mem="2000M")
    slurm.add("81", state="PENDING", limit_s=180, mem_mb=2000)
    store.insert_jobs(
        [run("79", Outcome.OOM, 1000, end=1000.0), run("80", Outcome.COMPLETED, 2000, used_mb=500, end=2000.0)]
    )
    r = mem_resizer(store, slurm, 600)
    r.on_outcome(run("80", Outcome.COMPLETED, 2000, used_mb=500))
    assert r.tick(slurm.queue()) == 1
    assert slurm.jobs["81"].mem_mb == 600  # the program needs less again: the old failure does not hold


def test_a_time_out_of_a_sibling_lifts_the_time_of_pending_ones(store, slurm):
    register(store, "91", original_s=3600, harp_time="3")
    slurm.add("91", state="PENDING", limit_s=180)
    to = JobRecord(job_id="90", outcome=Outcome.TIMEOUT, signature="sig-a", req_time_s=300, end_time=time.time() - 60)
    store.insert_jobs([to])
    r = Resizer(store, slurm, settings(resize_min_ratio=0.1, resize_min_s=300), lambda sub: Fresh(time_s=120))
    r.on_outcome(to)
    assert r.tick(slurm.queue()) == 1
    assert slurm.jobs["91"].time_limit_s == 600  # above the 5 min the sibling ran out at
    (row,) = store.limit_changes("91")
    assert row.kind == "lift" and "(job 90 ran out of time at 5 min)" in row.reason


def test_a_lowering_held_at_a_failures_floor_is_a_resize_not_a_lift(store, slurm):
    register(store, "95", original_s=600, harp_time="3", original_mem_mb=4000, harp_mem="3000M")
    slurm.add("95", state="PENDING", limit_s=180, mem_mb=3000)
    oom = run("94", Outcome.OOM, 700)
    store.insert_jobs([oom])
    r = mem_resizer(store, slurm, 300)
    r.on_outcome(oom)
    assert r.tick(slurm.queue()) == 1
    (row,) = store.limit_changes("95")
    assert (row.kind, row.new_mem_mb) == ("resize-mem", 1400) and "raised to the floor of 1400M" in row.reason
