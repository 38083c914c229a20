"""Users of one name from different sources (an imported trace, the live cluster) are not merged."""

import pytest
from report_helpers import job

from harpd.config import HarpSettings
from harpd.report.build import build, render
from harpd.report.window import Window


@pytest.fixture
def two_sources(store):
    store.insert_jobs(
        [
            job("1", source="slurm", user="alice", used_cpu_s=3600.0),
            job("2", source="slurm", user="alice", used_cpu_s=3600.0),
            job("1", source="ctc-sp2", user="alice", req_cpus=64, alloc_cpus=64),
            job("7", source="ctc-sp2", user="bob"),
        ]
    )
    return store


def report(store, **kw):
    return build(store, HarpSettings(), by="user", window=Window(None, None), user=None, source="test", **kw)


def test_rows_are_per_source_and_user(two_sources):
    r = report(two_sources)
    rows = {(g["source"], g["key"]): g for g in r.groups}
    assert set(rows) == {("slurm", "alice"), ("ctc-sp2", "alice"), ("ctc-sp2", "bob")}
    assert rows[("slurm", "alice")]["jobs"] == 2 and rows[("ctc-sp2", "alice")]["jobs"] == 1
    assert rows[("ctc-sp2", "alice")]["core_h_alloc"] == pytest.approx(64.0)  # not mixed with slurm's alice
    assert r.sources == ["ctc-sp2", "slurm"] and r.total["jobs"] == 4


def test_source_filter(two_sources):
    from harpd.report.source import Filters

    r = report(two_sources, filters=Filters(sources=("ctc-sp2",)))
    assert {(g["source"], g["key"]) for g in r.groups} == {("ctc-sp2", "alice"), ("ctc-sp2", "bob")}
    assert r.scope == "all users from ctc-sp2"


def test_the_rows_say_their_source(two_sources):
    from harpd.report.source import Filters

    r = report(two_sources)
    table = render(r, "table")
    head = next(x for x in table.splitlines() if x.startswith("user "))
    assert head.split()[:3] == ["user", "source", "jobs"]
    assert any(x.split()[:3] == ["alice", "ctc-sp2", "1"] for x in table.splitlines())
    assert "sources: ctc-sp2, slurm" in table
    html = render(r, "html")
    assert "<th>source</th>" in html and "<td>ctc-sp2</td>" in html
    one = report(two_sources, filters=Filters(sources=("slurm",)))  # one source: the heading says it
    assert "source" not in next(x for x in render(one, "table").splitlines() if x.startswith("user "))
