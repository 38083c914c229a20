"""The watcher's wiring: one listing per tick for every job, off unless soft limits apply."""

from __future__ import annotations

from watch_fakes import register, settings, slurm, store  # noqa: F401 (fixtures)

from harpd.slurm.base import SlurmError
from harpd.watch.privilege import Privilege
from harpd.watch.service import make


def test_one_listing_per_tick_whatever_the_number_of_jobs(store, slurm):
    for i in range(5):
        register(store, str(50 + i))
        slurm.add(str(50 + i), limit_s=60, used_s=30)
    w = make(settings=settings(), store=store, backend=slurm, privilege=Privilege(True, "root", True))
    w.tick()
    assert slurm.listings == 1 and len(slurm.updates) == 5


def test_off_when_unprivileged_or_soft_limits_off(store, slurm):
    assert make(settings=settings(), store=store, backend=slurm, privilege=Privilege(False, "plain", False)) is None
    # hard limits (privileged, soft limits off): only the checkpoint signal runs (docs/dnn.md, COCI)
    hard = make(settings=settings(), store=store, backend=slurm, privilege=Privilege(True, "root", False))
    assert hard is not None and hard.checkpoint is not None
    assert hard.extender is None and hard.resizer is None and hard.trials is None and hard.feedback is None
    assert (
        make(
            settings=settings(checkpoint_signal=False),
            store=store,
            backend=slurm,
            privilege=Privilege(True, "root", False),
        )
        is None
    )
    assert make(settings=settings(), store=store, backend=None, privilege=Privilege(True, "root", True)) is None


def test_a_failed_listing_changes_nothing(store, slurm):
    register(store, "60")
    slurm.add("60", limit_s=60, used_s=30)

    def down():
        raise SlurmError("scontrol show job gave no answer")

    slurm.queue = down
    w = make(settings=settings(), store=store, backend=slurm, privilege=Privilege(True, "root", True))
    w.tick()  # never raises
    assert slurm.updates == [] and store.limit_changes() == []


def test_a_store_fault_is_one_error_line_not_a_traceback(store, slurm, caplog):
    """A corrupted or unwritable store is the admin's to fix: one line each tick and outcome, as health says."""
    import logging

    from harpd.store import StoreError

    register(store, "61")
    slurm.add("61", limit_s=60, used_s=30)
    w = make(settings=settings(), store=store, backend=slurm, privilege=Privilege(True, "root", True))

    def broken(*_a, **_kw):
        raise StoreError("/x/harp.db: not a harp database (file is not a database); move it aside")

    w.extender.tick = broken

    class Listener:  # the soft-limit feedback: it ticks too, and hears outcomes
        on_outcome = staticmethod(broken)

        @staticmethod
        def tick(jobs: object) -> None:
            return None

    w.feedback = listener = Listener()
    with caplog.at_level(logging.INFO, logger="harpd"):
        w.tick()
        w.on_outcome(type("Rec", (), {"job_id": "61"})())
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert [r.getMessage() for r in errors] == [
        "watch: Extender: /x/harp.db: not a harp database (file is not a database); move it aside",
        f"watch: {type(listener).__name__} on job 61: /x/harp.db: not a harp database (file is not a database); "
        "move it aside",
    ]
    assert all(r.exc_info is None for r in caplog.records)


def test_a_tick_is_timed_and_a_slow_one_logged_once(store, slurm, caplog, monkeypatch):
    """#44: health shows the last tick against the lead; a tick over half the lead is logged once, not per tick."""
    from harpd.cli.health_cmd import render
    from harpd.daemon.handlers import Handlers

    slurm.add("70", limit_s=600, used_s=30)
    w = make(settings=settings(margin_s=100.0), store=store, backend=slurm, privilege=Privilege(True, "root", True))
    w.tick()
    assert w.last_tick_jobs == 1 and w.last_tick_s is not None and w.last_tick_s < 50
    clock = [1000.0]
    monkeypatch.setattr("harpd.watch.service.time.monotonic", lambda: clock[0])
    with caplog.at_level("INFO", logger="harpd.watch"):
        for took in (60.0, 70.0, 1.0):  # two slow ticks, then a quick one
            started = clock[0]
            clock[0] += took
            w._timed(started, 5000)
    slow = [r for r in caplog.records if "over half the 100 s lead" in r.getMessage()]
    back = [r for r in caplog.records if "within half the lead" in r.getMessage()]
    assert len(slow) == 1 and len(back) == 1 and w.last_tick_s == 1.0
    h = Handlers(store)
    h.watch = w
    shown = h._watch_health(w)
    assert (shown.last_tick_s, shown.jobs, shown.lead_s) == (1.0, 5000, 100.0)
    text = render({"version": "x", "watch": shown.model_dump()})
    assert "watcher:     last tick 1.00 s for 5000 jobs, lead 100 s" in text and "SLOW" not in text
    slow_text = render({"version": "x", "watch": {**shown.model_dump(), "last_tick_s": 60.0}})
    assert "SLOW: over half the lead" in slow_text
