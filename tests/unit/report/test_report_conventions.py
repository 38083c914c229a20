"""The report as a user meets it: their own jobs and savings, programs by name, calendar years,
no red "-0.00", axis ticks that differ, tables that stay inside the page."""

from __future__ import annotations

import calendar
import re

import numpy as np
import pytest
from report_helpers import NOW, job

from harpd.report.aggregate import build_report, program_labels
from harpd.report.columns import columns_for, from_records
from harpd.report.fmt import compact, is_zero_shown
from harpd.report.render_html import _sign, _time_labels
from harpd.report.render_html import render as render_html
from harpd.report.render_table import render as render_table
from harpd.report.svg import nice_ticks, tick_labels
from harpd.report.window import Window


def _utc(y: int, m: int = 1, d: int = 1) -> float:
    return float(calendar.timegm((y, m, d, 0, 0, 0)))


def test_year_bars_carry_the_calendar_year_of_their_jobs():
    """1996's jobs (an old trace) are labelled 1996, and 1997's 1997: calendar bins, not 365-day ones."""
    recs = [
        job(
            str(i),
            end_time=_utc(1996, 1, 3) + i * 86400 * 7,
            start_time=_utc(1996, 1, 2) + i * 86400 * 7,
            submit_time=_utc(1996, 1, 1) + i * 86400 * 7,
        )
        for i in range(100)
    ]  # Jan 1996 .. Dec 1997
    r = build_report(from_records(recs, columns_for("user")), by="user", window=Window(None, None), now=NOW)
    tl = r.timeline
    labels = _time_labels(tl["starts"], tl["bin_s"])
    assert tl["bin_s"] >= 28 * 86400
    years = {lab[:4] for lab in labels}
    assert years == {"1996", "1997"}, labels
    assert "1995" not in "".join(labels)
    assert sum(tl["jobs"]) == 100
    # a job on 31 December 1996 23:59 UTC is 1996's, one a minute later 1997's
    recs = [
        job("a", end_time=_utc(1997) - 60, start_time=_utc(1997) - 120, submit_time=_utc(1997) - 180),
        job("b", end_time=_utc(1997) + 60, start_time=_utc(1997), submit_time=_utc(1997) - 10),
    ]
    r = build_report(from_records(recs, columns_for("user")), by="user", window=Window(_utc(1985), _utc(2005)), now=NOW)
    starts, counts = r.timeline["starts"], r.timeline["jobs"]
    by_year = dict(zip(_time_labels(starts, r.timeline["bin_s"]), counts))
    assert by_year["1996"] == 1 and by_year["1997"] == 1 and by_year["1990"] == 0 and len(counts) == 20


@pytest.mark.parametrize(
    "value, shown, colour",
    [
        (-0.001, "0.00", ""),
        (-0.0049, "0.00", ""),
        (0.0, "0", ""),
        (-0.3, "-0.30", "bad"),
        (2.5, "2.5", "good"),
        (None, "-", ""),
    ],
)
def test_no_negative_zero_and_no_colour_for_it(value, shown, colour):
    assert compact(value) == shown
    assert _sign(value) == colour


def test_html_never_paints_a_tiny_loss_red():
    r = build_report(from_records([job("1")], columns_for("user")), by="user", window=Window(None, None), now=NOW)
    r.harp["net_saved"] = {"core_h_alloc": -0.001, "mem_gbh_alloc": -0.004}
    html = render_html(r)
    assert "-0.00" not in html and not re.search(r'class="[^"]*bad[^"]*"[^>]*>\s*<div class="v">0', html)


@pytest.mark.parametrize("hi", [0.012, 0.3, 5.0, 1234.0, 7e6, 1e-5, 0.0049, 123456.0])
def test_axis_ticks_always_differ(hi):
    ticks = nice_ticks(hi)
    labels = tick_labels(ticks)
    assert len(set(labels)) == len(labels), labels
    assert labels[0] == "0"


def test_tables_sit_in_a_scrolling_box_and_headers_wrap():
    recs = [job(str(i), user=f"user{i}") for i in range(5)]
    r = build_report(from_records(recs, columns_for("user")), by="user", window=Window(None, None), now=NOW)
    html = render_html(r)
    assert html.count('<div class="wide"><table') == html.count("<table")
    assert ".wide{overflow-x:auto;max-width:100%}" in html and "th{white-space:normal" in html


def test_by_signature_rows_name_the_program():
    recs = (
        [job(str(i), signature="sig:1a2b3c4d5e6f7a8b", job_name="bwa-align") for i in range(3)]
        + [job("9", signature="sig:1a2b3c4d5e6f7a8b", job_name="other-name")]
        + [job("10", signature="sig:ffffeeee00001111", job_name=None)]
        + [job("11", signature="sig:empty", job_name="setup.sh")]
    )
    cols = columns_for("signature")
    assert "job_name" in cols
    r = build_report(from_records(recs, cols), by="signature", window=Window(None, None), now=NOW)
    keys = {g["key"]: g for g in r.groups}
    assert "bwa-align [1a2b3c4d]" in keys and keys["bwa-align [1a2b3c4d]"]["jobs"] == 4
    assert keys["bwa-align [1a2b3c4d]"]["signature"] == "sig:1a2b3c4d5e6f7a8b"
    assert "sig:ffffeeee00001111" in keys  # no name on record: the signature stays
    assert "setup.sh [no command]" in keys
    assert "bwa-align [1a2b3c4d]" in render_table(r)


def test_program_labels_with_hostile_names():
    codes = np.array([0, 0, 1, 1, 1], dtype=np.int64)
    names = np.array(["<script>", "<script>", "", None, "x"], dtype=object)
    assert program_labels(["sig:aaaa", "sig:bbbb"], codes, names) == ["<script> [aaaa]", "x [bbbb]"]
    assert program_labels([], np.zeros(0, np.int64), np.zeros(0, object)) == []


def _personal(personal: bool):
    recs = [job("1"), job("2", harp_sized=True)]
    r = build_report(
        from_records(recs, columns_for("user")),
        by="user",
        window=Window(None, None),
        now=NOW,
        scoreboard={
            "tables": [
                {"title": "time", "rows": [{"name": "harp", "resource": "time", "score": 2970.0}], "columns": ["score"]}
            ],
            "notes": [],
        },
    )
    r.personal = personal
    return r


def test_a_users_own_report_shows_their_savings_not_the_model_scoreboard():
    text = render_table(_personal(True))
    assert text.startswith("harp report: your jobs")
    assert "What harp saved you" in text and "Model scoreboard" not in text and "2.97e+03" not in text
    assert text.index("What harp saved you") < text.index("Failures by cause")
    html = render_html(_personal(True))
    assert "What harp saved you" in html and "Model scoreboard" not in html
    admin = render_table(_personal(False))
    assert "Model scoreboard" in admin and "your jobs" not in admin
    assert "Model scoreboard" in render_html(_personal(False))


def test_the_cli_gives_an_ordinary_user_the_personal_report(tmp_path, monkeypatch):
    """Through `harp report` as a user who is no admin: no scoreboard computed or shown."""
    import contextlib
    import io

    from harpd.cli import report_cmd
    from harpd.cli.main import main as harp
    from harpd.store import Store

    for name in [n for n in __import__("os").environ if n.upper().startswith("HARP_")]:
        monkeypatch.delenv(name)
    db = tmp_path / "harp.db"
    store = Store.open(db)
    store.insert_jobs([job("1", user="alice", end_time=NOW - 3600)])
    store.close()
    monkeypatch.setattr(report_cmd, "is_admin", lambda uid, group: False)
    monkeypatch.setattr(report_cmd, "user_name", lambda uid: "alice")
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        assert harp(["report", "--db", str(db), "-S", "all"]) == 0
    text = out.getvalue()
    assert "your jobs" in text and "What harp saved you" in text and "Model scoreboard" not in text
    monkeypatch.setattr(report_cmd, "is_admin", lambda uid, group: True)
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        assert harp(["report", "--db", str(db), "-S", "all"]) == 0
    assert "Model scoreboard" in out.getvalue()


def test_is_zero_shown():
    assert is_zero_shown("0") and is_zero_shown("0.00") and is_zero_shown("-0.0")
    assert not is_zero_shown("0.01") and not is_zero_shown("-") and not is_zero_shown("10")
