"""``harp status``/health show the limits mode and each extension."""

from __future__ import annotations

from watch_fakes import register, store  # noqa: F401 (fixture)

from harpd import protocol as p
from harpd.cli.status_cmd import render
from harpd.config import HarpSettings
from harpd.daemon.handlers import Handlers, Peer

MODE = {"mode": "soft", "privileged": True, "why": "harpd runs as root"}


def test_health_and_status_carry_the_mode_and_the_extensions(store):
    register(store, "40")
    store.add_limit_change("40", "extend", 60, 120, "10 s left of 1 min; back to the original request", "done")
    h = Handlers(store, HarpSettings(), admin_gid=None, limits_mode=MODE)
    peer = Peer(pid=1, uid=0, gid=0, user="root", groups=frozenset())
    health = h.handle(peer, p.HealthRequest(op="health"))
    assert health.limits == MODE
    job = h.handle(peer, p.StatusRequest(op="status", job_id="40")).job
    assert job["limits_mode"] == MODE
    text = render(job)
    assert "time limits:   soft" in text and "extensions:    1" in text
    assert "extended 1 min -> 2 min" in text and "why: 10 s left of 1 min" in text


def test_status_without_a_mode_or_changes_says_nothing_new(store):
    register(store, "41")
    h = Handlers(store, HarpSettings(), admin_gid=None)
    job = h.handle(Peer(pid=1, uid=0, gid=0, user="root", groups=frozenset()), p.StatusRequest(op="status", job_id="41")).job
    assert "limits_mode" not in job and job["limit_changes"] == []
    assert "extensions" not in render(job) and "time limits" not in render(job)
