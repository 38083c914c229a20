"""``harp status``/health show the limits mode and each extension."""

from __future__ import annotations

from watch_fakes import register, store  # noqa: F401 (fixture)

from harpd import protocol as p
from harpd.cli.status_cmd import render
from harpd.config import HarpSettings
from harpd.daemon.handlers import Handlers, HealthSources, Peer
from harpd.report.status_view import JobStatus
from harpd.store import Resize

MODE = p.LimitsHealth(mode="soft", privileged=True, why="harpd runs as root")


def test_health_and_status_carry_the_mode_and_the_extensions(store):
    register(store, "40")
    store.add_limit_change("40", "extend", 60, 120, "10 s left of 1 min; back to the original request", "done")
    h = Handlers(store, HarpSettings(), admin_gid=None, health=HealthSources(limits_mode=MODE))
    peer = Peer(pid=1, uid=0, gid=0, user="root", groups=frozenset())
    health = h.handle(peer, p.HealthRequest(op="health"))
    assert health.limits == MODE
    job = h.handle(peer, p.StatusRequest(op="status", job_id="40")).job
    assert job["limits_mode"] == MODE
    text = render(JobStatus.from_json(job))
    assert "time limits:   soft" in text and "extensions:    1" in text
    assert "extended 1 min -> 2 min" in text and "why: 10 s left of 1 min" in text


def test_status_without_a_mode_or_changes_says_nothing_new(store):
    register(store, "41")
    h = Handlers(store, HarpSettings(), admin_gid=None)
    job = h.handle(
        Peer(pid=1, uid=0, gid=0, user="root", groups=frozenset()), p.StatusRequest(op="status", job_id="41")
    ).job
    assert "limits_mode" not in job and job["limit_changes"] == []
    assert "extensions" not in render(JobStatus.from_json(job)) and "time limits" not in render(
        JobStatus.from_json(job)
    )


def test_status_shows_a_pending_memory_resize_in_mb(store):
    register(store, "42", original_mem_mb=4000, harp_mem="2000M")
    store.add_limit_change("42", "resize-mem", 1800, 1800, "re-decided while pending", "done", mem=Resize(2000, 880))
    h = Handlers(store, HarpSettings(), admin_gid=None, health=HealthSources(limits_mode=MODE))
    job = h.handle(
        Peer(pid=1, uid=0, gid=0, user="root", groups=frozenset()), p.StatusRequest(op="status", job_id="42")
    ).job
    text = render(JobStatus.from_json(job))
    assert "re-sized --mem 2000 MB -> 880 MB" in text and "30 min -> 30 min" not in text


def test_health_shows_the_budget_scale_when_soft_limits_are_on(store):
    from harpd.predict.soft import SoftPolicy
    from harpd.predict.soft_state import SoftState

    soft_state = SoftState(SoftPolicy(gamma=0.5), None)
    soft_state.extended()
    h = Handlers(store, HarpSettings(), admin_gid=None, health=HealthSources(limits_mode=MODE, soft_state=soft_state))
    health = h.handle(Peer(pid=1, uid=0, gid=0, user="root", groups=frozenset()), p.HealthRequest(op="health"))
    assert health.limits["mode"] == "soft" and health.limits["budget_scale"] > 1.4
    assert health.limits["min_limit_s"] == 180.0  # the watcher's 120 s lead and 30 s interval, in minutes


def test_status_shows_a_checkpoint_signal_as_such_not_as_a_limit(store):
    register(store, "43", harp_lines=["#HARP checkpoint cost=1m"])
    store.add_limit_change("43", "checkpoint-signal", 1_700_000_000, 95, "SIGUSR1 25 s before its end", "done")
    h = Handlers(store, HarpSettings(), admin_gid=None, health=HealthSources(limits_mode=MODE))
    job = h.handle(
        Peer(pid=1, uid=0, gid=0, user="root", groups=frozenset()), p.StatusRequest(op="status", job_id="43")
    ).job
    text = render(JobStatus.from_json(job))
    assert "asked to checkpoint after 0:01:35 of its run" in text
    assert "why: SIGUSR1 25 s before its end" in text and "extensions:    0" in text
    assert "1700000000" not in text.replace(",", "")
