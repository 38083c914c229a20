"""Checkpoint signals: a resumable job is signalled once per run, lead before its end (hard or soft)."""

from __future__ import annotations

from watch_fakes import register, settings, slurm, store  # noqa: F401 (fixtures)

from harpd.recovery.resume import CHECKPOINT_SIGNAL, last_signal
from harpd.watch.checkpoint_signal import CheckpointSignal
from harpd.watch.privilege import Privilege
from harpd.watch.service import make

LINE = ["#HARP checkpoint cost=10s signal=USR2 lead=30s"]


def rows(store, jid):
    return [(r.old_time_s, r.new_time_s, r.step) for r in store.limit_changes(jid) if r.kind == CHECKPOINT_SIGNAL]


def test_hard_limits_signal_once_lead_before_harps_limit(store, slurm):
    register(store, "7", original_s=600, harp_time="2", harp_lines=LINE)
    slurm.add("7", limit_s=120, used_s=80, start=1000.0)
    step = CheckpointSignal(store, slurm, soft_limits=False)
    assert step.tick(slurm.queue()) == 0 and slurm.signals == []  # 40 s left: above the 30 s lead
    slurm.jobs["7"].time_used_s = 95
    assert step.tick(slurm.queue()) == 1
    assert slurm.signals == [("7", "USR2")]
    slurm.jobs["7"].time_used_s = 110
    assert step.tick(slurm.queue()) == 0 and len(slurm.signals) == 1  # once per run
    assert rows(store, "7") == [(1000, 95, "done")]
    assert last_signal(store, "7").new_time_s == 95
    # requeued: a new run (new start) is signalled again, at the same limit
    slurm.jobs["7"].time_used_s, slurm.jobs["7"].start_time = 100, 2000.0
    assert step.tick(slurm.queue()) == 1 and slurm.signals[-1] == ("7", "USR2")
    assert last_signal(store, "7").old_time_s == 2000


def test_soft_limits_signal_before_the_users_own_limit_not_harps(store, slurm):
    register(store, "8", original_s=600, harp_time="2", harp_lines=["#HARP checkpoint cost=1m"])
    slurm.add("8", limit_s=120, used_s=110)
    step = CheckpointSignal(store, slurm, soft_limits=True)
    assert step.tick(slurm.queue()) == 0  # harp's limit is extended: no signal yet
    store.add_limit_change("8", "extend", 120, 600, "harp extended it", "done")  # the extender's step
    slurm.jobs["8"].time_limit_s, slurm.jobs["8"].time_used_s = (
        600,
        470,
    )  # 130 s left of the request: above the default 2 min lead
    assert step.tick(slurm.queue()) == 0
    slurm.jobs["8"].time_used_s = 490
    assert step.tick(slurm.queue()) == 1 and slurm.signals == [("8", "USR1")]


def test_not_resumable_foreign_or_bad_line_is_left_alone(store, slurm, caplog):
    register(store, "9", harp_lines=[])  # no checkpoint line
    register(store, "10", harp_lines=LINE, uid=2000)  # Slurm says uid 1000 owns it
    register(store, "11", harp_lines=["#HARP checkpoint cost=1m signal=US-R1"])
    for jid in ("9", "10", "11"):
        slurm.add(jid, limit_s=60, used_s=59)
    step = CheckpointSignal(store, slurm, soft_limits=False)
    assert step.tick(slurm.queue()) == 0 and slurm.signals == []
    assert "signal=US-R1 is not a signal name" in caplog.text
    assert "not signalled for a checkpoint: Slurm reports owner uid 1000" in caplog.text


def test_a_run_that_ended_before_a_decided_signal_is_not_signalled(store, slurm):
    register(store, "12", harp_lines=LINE)
    store.add_limit_change("12", CHECKPOINT_SIGNAL, 1_700_000_000, 50, "crash before scancel", "decided")
    slurm.add("12", limit_s=60, used_s=55)  # the same run still runs: the signal is sent now
    step = CheckpointSignal(store, slurm, soft_limits=False)
    assert step.tick(slurm.queue()) == 1 and slurm.signals == [("12", "USR2")]
    store.add_limit_change("12", CHECKPOINT_SIGNAL, 5, 50, "an old run", "decided")
    step.tick(slurm.queue())
    assert ("5", 50, "ended") in [(str(a), b, c) for a, b, c in rows(store, "12")]


def test_the_hard_limits_watcher_signals_through_its_tick(store, slurm):
    register(store, "13", harp_lines=LINE)
    slurm.add("13", limit_s=60, used_s=40)
    w = make(settings=settings(), store=store, backend=slurm, privilege=Privilege(True, "root", False))
    w.tick()
    assert slurm.signals == [("13", "USR2")] and slurm.updates == []  # signalled, never extended


def test_a_job_with_its_own_signal_and_requeue_is_signalled_by_slurm_not_harpd(store, slurm):
    """--signal=B:USR1@40 --requeue (even beside a checkpoint line): Slurm sends it; a second would be one too many."""
    register(store, "12", original_s=600, harp_time="2", harp_lines=LINE, options={"signal_s": 40, "requeue": True})
    # --signal without --requeue declares nothing: the checkpoint line's signal is harpd's to send
    register(store, "13", original_s=600, harp_time="2", harp_lines=LINE, options={"signal_s": 40})
    for jid in ("12", "13"):
        slurm.add(jid, limit_s=120, used_s=100, start=1000.0)
    step = CheckpointSignal(store, slurm, soft_limits=False)
    assert step.tick(slurm.queue()) == 1 and slurm.signals == [("13", "USR2")]
    assert rows(store, "12") == []
