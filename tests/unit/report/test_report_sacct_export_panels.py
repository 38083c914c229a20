"""An sacct export without TotalCPU and MaxRSS (Cedar's fields): what can be shown is, the rest says why."""

import re

import pytest
from report_helpers import NOW, job

from harpd.config import HarpSettings
from harpd.ingest.importer import import_file
from harpd.records import Outcome
from harpd.report.aggregate import build_report
from harpd.report.build import build, render
from harpd.report.columns import columns_for, from_records
from harpd.report.fmt import compact
from harpd.report.render_html import render as render_html
from harpd.report.window import Window

# the fields of the public Cedar export (no User, no TotalCPU, no MaxRSS), three jobs of its cut
CEDAR = (
    "JobID|Account|Partition|ReqCPUS|ReqMem|ReqTRES|NNodes|Timelimit|Elapsed|State|Submit|Eligible|Start|End\n"
    "57979551|acct18337|part48|2|3800M|billing=1,cpu=2,gres/gpu=1,mem=3800M,node=1|1|20:00:00|19:35:20|"
    "OUT_OF_MEMORY|2021-05-01T00:06:13|2021-05-01T00:06:13|2021-05-02T17:06:26|2021-05-03T12:41:46\n"
    "57979981|acct18391|part25|528|2112000M|billing=528,cpu=528,node=11|11|1-00:00:00|1-00:00:01|TIMEOUT|"
    "2021-05-01T00:16:46|2021-05-01T00:16:46|2021-05-03T17:07:03|2021-05-04T17:07:04\n"
    "57981082|acct5295|part25|1|102400M|billing=25,cpu=1,mem=102400M,node=1|1|1-00:00:00|02:00:00|COMPLETED|"
    "2021-05-01T00:35:13|2021-05-01T00:35:13|2021-05-01T14:19:51|2021-05-01T16:19:51\n"
)


@pytest.fixture
def cedar(store, tmp_path):
    path = tmp_path / "cedar-2021.sacct.psv"
    path.write_text(CEDAR)
    import_file(path, store, progress=False)
    return store


def report(store, by):
    return build(store, HarpSettings(), by=by, window=Window(None, None), user=None, source="test")


def test_reserved_against_elapsed_is_shown_per_account(cedar):
    r = report(cedar, "account")
    rows = {g["key"]: g for g in r.groups}
    # 1 CPU x (24 h limit - 2 h elapsed): reserved, never held
    assert rows["acct5295"]["core_h_limit_unused"] == pytest.approx(22.0)
    assert rows["acct18337"]["core_h_limit_unused"] == pytest.approx(2 * (20 - (19 + 35 / 60 + 20 / 3600)))
    html = render(r, "html")
    assert 'class="chart timeline timeline-core timeline-reserved"' in html
    assert 'class="chart wasters wasters-core wasters-reserved"' in html and "acct5295" in html
    unused = r.total["core_h_limit_unused"]
    assert unused == pytest.approx(sum(g["core_h_limit_unused"] for g in r.groups))
    assert any(f"{compact(unused)} core-h" in n and "Add TotalCPU,MaxRSS to sacct -o" in n for n in r.notes)


def test_empty_panels_say_which_sacct_fields_would_fill_them(cedar):
    html = render(report(cedar, "account"), "html")
    notes = re.findall(r'<div class="missing[^"]*"><b>([^<]*)</b>needs ([^,]*),', html)
    needs = {title: what for title, what in notes}
    assert needs["CPU efficiency"] == "TotalCPU" and needs["Memory efficiency"] == "MaxRSS"
    assert any("wasted memory" in t and w == "MaxRSS" for t, w in needs.items())
    assert "add TotalCPU to <code>sacct -o</code>" in html and "add MaxRSS to <code>sacct -o</code>" in html
    assert "Time efficiency" not in needs  # Elapsed and Timelimit are there: its chart is drawn
    assert 'class="chart dist dist-time_eff"' in html


def test_by_user_without_a_user_field_says_what_to_do(cedar):
    r = report(cedar, "user")
    assert any("no User field" in n and "--by account" in n for n in r.notes)


def test_timeline_skips_the_empty_years_between_sources():
    recs = [job("1", source="ctc", end_time=NOW - 30 * 365 * 86400.0), job("2", end_time=NOW - 86400.0)]
    cols = list(dict.fromkeys(columns_for("user") + ["source"]))
    r = build_report(from_records(recs, cols), by="user", window=Window(None, None), now=NOW)
    t = r.timeline
    assert len(t["starts"]) == 2 and t["jobs"] == [1, 1] and t["gaps"] >= 25
    assert "empty year(s) between" in render_html(r)
    # a window the admin gave keeps its empty bins: "nothing ran then" is information
    w = build_report(from_records(recs[1:], cols), by="user", window=Window(NOW - 30 * 86400.0, NOW), now=NOW)
    assert w.timeline["gaps"] == 0 and 0 in w.timeline["jobs"]


def test_a_full_export_shows_no_missing_field_notes():
    r = build_report(
        from_records([job("1"), job("2", outcome=Outcome.TIMEOUT)], columns_for("user")),
        by="user",
        window=Window(None, None),
        now=NOW,
    )
    assert 'class="missing' not in render_html(r)
