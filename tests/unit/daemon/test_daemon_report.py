"""harpd's ``report`` operation: the CLI's report, scoped by the caller's identity."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import replace

import pytest

from harpd import protocol as p
from harpd.config import HarpSettings
from harpd.daemon.handlers import Handlers, Peer
from harpd.records import JobRecord, Outcome

ALICE = Peer(pid=10, uid=1000, gid=1000, user="alice", groups=frozenset({1000}))
BOB = Peer(pid=11, uid=1001, gid=1001, user="bob", groups=frozenset({1001, 5000}))
ROOT = Peer(pid=1, uid=0, gid=0, user="root", groups=frozenset({0}))


def req(**obj):
    return p.parse_request(json.dumps({"v": 1, "op": "report", **obj}))


def rec(job_id: str, user: str, outcome: Outcome = Outcome.COMPLETED, end: float | None = None) -> JobRecord:
    end = time.time() - 3600 if end is None else end
    return JobRecord(
        job_id=job_id,
        user=user,
        account="a",
        partition="cpu",
        signature=f"{user}-sig",
        submit_time=end - 7200,
        start_time=end - 3600,
        end_time=end,
        outcome=outcome,
        req_time_s=7200.0,
        req_mem_mb=4096.0,
        req_cpus=2,
        alloc_cpus=2,
        used_time_s=3600.0,
        used_mem_mb=900.0,
        used_cpu_s=3600.0,
    )


@pytest.fixture
def handlers(store):
    store.insert_jobs(
        [
            rec("1", "alice"),
            rec("2", "alice", Outcome.TIMEOUT),
            rec("3", "bob", Outcome.OOM),
            rec("4", "bob", end=1_000_000_000.0),
        ]
    )  # 2001: outside the default 30 days
    settings = HarpSettings.model_validate({"server": {"admin_group": "5000"}, "report": {"max_concurrent": 1}})
    return Handlers(store, settings)


def report_json(h, peer, **kw):
    ans = h.handle(peer, req(format="json", **kw))
    assert isinstance(ans, p.ReportAnswer), ans
    return json.loads(ans.text)


def test_a_user_gets_only_their_own_jobs(handlers):
    d = report_json(handlers, ALICE, since="all")
    assert d["scope"] == "user alice" and d["total"]["jobs"] == 2 and d["total"]["timeout"] == 1
    assert [g["key"] for g in d["groups"]] == ["alice"]
    assert d["source"].startswith("harpd (")


def test_naming_yourself_is_fine_naming_another_is_refused(handlers):
    assert report_json(handlers, ALICE, user="alice", since="all")["total"]["jobs"] == 2
    ans = handlers.handle(ALICE, req(user="bob"))
    assert isinstance(ans, p.ErrorAnswer)
    assert ans.error.startswith("only admins (root or group 5000) may report on other users")
    assert "bob-sig" not in ans.error


def test_admins_see_everyone_and_may_pick_a_user(handlers):
    everyone = report_json(handlers, ROOT, since="all")
    assert everyone["scope"] == "all users" and everyone["total"]["jobs"] == 4
    by_group = report_json(handlers, BOB, since="all", user="alice", by="signature")  # BOB is in group 5000
    assert by_group["scope"] == "user alice" and [g["key"] for g in by_group["groups"]] == ["alice-sig"]


def test_account_partition_and_source_filters_reach_harpds_report(handlers, store):
    store.insert_jobs([replace(rec("5", "alice"), account="chem", partition="gpu", source="ctc")])
    assert report_json(handlers, ROOT, since="all", account="chem")["total"]["jobs"] == 1
    assert report_json(handlers, ROOT, since="all", partition="gpu,none")["total"]["jobs"] == 1
    assert report_json(handlers, ROOT, since="all", source="ctc")["total"]["jobs"] == 1
    assert report_json(handlers, ROOT, since="all", account="a")["total"]["jobs"] == 4
    # a user's own scope still holds under a filter
    assert report_json(handlers, BOB, since="all", account="chem", user="bob")["total"]["jobs"] == 0


def test_the_default_window_and_an_explicit_one(handlers):
    assert report_json(handlers, ROOT)["total"]["jobs"] == 3  # 30 days: the 2001 job is out
    assert report_json(handlers, ROOT, since="2000-01-01", until="2002-01-01")["total"]["jobs"] == 1


@pytest.mark.parametrize("fmt, marker", [("table", "harp report"), ("csv", "User,source,jobs,"), ("html", "<svg")])
def test_every_format_renders(handlers, fmt, marker):
    ans = handlers.handle(ROOT, req(format=fmt, since="all"))
    assert isinstance(ans, p.ReportAnswer) and marker in ans.text


def test_bad_window_is_one_line(handlers):
    ans = handlers.handle(ALICE, req(since="last tuesday"))
    assert isinstance(ans, p.ErrorAnswer) and "--since: cannot read" in ans.error and "\n" not in ans.error


@pytest.mark.parametrize(
    "bad, where",
    [
        ({"format": "pdf"}, "format"),
        ({"by": "host"}, "by"),
        ({"top": -1}, "top"),
        ({"uid": 0}, "uid"),
    ],
)
def test_malformed_requests_are_refused(bad, where):
    with pytest.raises(p.ProtocolError, match=where):
        req(**bad)


def test_reports_beyond_max_concurrent_are_told_to_retry(handlers, monkeypatch):
    from harpd.report import build

    entered, release = threading.Event(), threading.Event()
    real = build.build

    def slow(*a, **kw):
        entered.set()
        release.wait(10)
        return real(*a, **kw)

    monkeypatch.setattr(build, "build", slow)
    answers = []
    t = threading.Thread(target=lambda: answers.append(handlers.handle(ROOT, req(since="all"))))
    t.start()
    assert entered.wait(10)
    busy = handlers.handle(ALICE, req())
    release.set()
    t.join(10)
    assert isinstance(busy, p.ErrorAnswer) and "already building 1 report(s); retry" in busy.error
    assert isinstance(answers[0], p.ReportAnswer)
    assert isinstance(handlers.handle(ALICE, req()), p.ReportAnswer)  # the slot is free again
