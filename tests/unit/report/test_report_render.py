"""Table, CSV, JSON and HTML renderings of one report agree and stay in bounds."""

import csv
import io
import json
import re

import pytest
from report_helpers import NOW, bench_module, job

from harpd.records import ModelRow, Outcome
from harpd.report.aggregate import METRIC_NAMES, build_report
from harpd.report.columns import columns_for, from_records
from harpd.report.render_csv_json import render_csv, render_json
from harpd.report.render_html import render as render_html
from harpd.report.render_table import WIDTH
from harpd.report.render_table import render as render_table
from harpd.report.scoreboard import from_models_table
from harpd.report.window import Window


@pytest.fixture(scope="module")
def synthetic_report():
    recs, _s, _a = bench_module().synthetic(4000, seed=7)
    cols = list(dict.fromkeys(columns_for("signature") + ["user"]))
    r = build_report(from_records(recs, cols), by="signature", window=Window(None, None), now=NOW)
    r.scoreboard = {
        "tables": [
            from_models_table(
                [
                    ModelRow(1, "harp", "time", 1.0, 10, {"pinball": 0.2}, True, "/m/1"),
                ]
            )
        ],
        "notes": [],
    }
    return r


def test_table_fits_100_columns_even_with_long_names():
    recs = [job("1", user="a-very-long-user-name-that-goes-on-and-on" * 3), job("2", outcome=Outcome.TIMEOUT)]
    r = build_report(from_records(recs, columns_for("user")), by="user", window=Window(None, None), now=NOW)
    r.notes.append("x" * 250)
    r.source = "/very/long/path/" + "d" * 150 + "/harp.db"
    text = render_table(r)
    assert max(len(line) for line in text.splitlines()) <= WIDTH
    assert re.search(r"^a-very-long-user-name\S*~ ", text, re.M) and "TOTAL" in text  # names are cut, never headers


def test_table_sections_and_top(synthetic_report):
    text = render_table(synthetic_report, top=5)
    lines = text.splitlines()
    assert max(len(x) for x in lines) <= WIDTH
    rules = [i for i, x in enumerate(lines) if x and set(x) <= {"-", " "}]  # tabulate's rule, then TOTAL's
    shown = lines[rules[0] + 1 : rules[1]]
    assert len(shown) == 6 and shown[-1].startswith("... ")  # 5 rows + the "more" line
    for heading in ("Failures by cause", "Resubmissions:", "harp-sized jobs:", "Model scoreboard"):
        assert heading in text
    assert len(render_table(synthetic_report, top=0).splitlines()) > len(lines)


def test_csv_has_every_group_and_metric_and_matches_json(synthetic_report):
    rows = list(csv.reader(io.StringIO(render_csv(synthetic_report))))
    assert rows[0] == ["signature", "source", *METRIC_NAMES]
    assert len(rows) == len(synthetic_report.groups) + 1  # header + groups; the total is in the JSON
    d = json.loads(render_json(synthetic_report))
    first = dict(zip(rows[0], rows[1]))
    g = d["groups"][0]
    assert first["signature"] == g["key"]
    assert float(first["core_h_alloc"]) == pytest.approx(g["core_h_alloc"], rel=1e-9)
    assert int(first["jobs"]) == g["jobs"]


def test_json_is_strict_and_complete(synthetic_report):
    text = render_json(synthetic_report)
    assert "NaN" not in text and "Infinity" not in text
    d = json.loads(text)
    for key in (
        "window",
        "total",
        "groups",
        "outcomes",
        "failures",
        "resubmissions",
        "harp",
        "distributions",
        "timeline",
        "calibration",
        "scoreboard",
        "metrics",
    ):
        assert key in d
    assert d["by"] == "signature" and d["window"]["text"] == "at any time"


def test_html_is_self_contained(synthetic_report):
    page = render_html(synthetic_report)
    assert page.startswith("<!DOCTYPE html>")
    assert "Content-Security-Policy" in page and "default-src 'none'" in page
    low = page.lower()
    for bad in ("<script", "<link", "src=", "@import", "url(", "<iframe", "<img"):
        assert bad not in low, bad
    # the only URL is the SVG namespace
    assert set(re.findall(r"https?://[^\"' )]+", page)) == {"http://www.w3.org/2000/svg"}
    for cls in (
        "dist-cpu_eff",
        "dist-mem_eff",
        "dist-time_eff",
        "timeline-core",
        "timeline-mem",
        "wasters-core",
        "wasters-mem",
        "calib-time",
        "calib-mem",
        "coverage-time",
        "coverage-mem",
    ):
        assert f"chart {cls}" in page or re.search(rf'class="chart [^"]*{cls}', page), cls


def test_html_escapes_what_users_control():
    evil = '<script>alert(1)</script>"&'
    r = build_report(
        from_records([job("1", user=evil)], columns_for("user")), by="user", window=Window(None, None), now=NOW
    )
    page = render_html(r)
    assert "<script>" not in page and "&lt;script&gt;" in page


def test_html_of_an_empty_window_still_renders():
    r = build_report(from_records([], columns_for("user")), by="user", window=Window(NOW - 86400, NOW), now=NOW)
    r.notes.append("the store holds 3 finished job(s)")
    page = render_html(r)
    assert "No finished jobs in this window" in page and "the store holds 3" in page
    assert "No finished" in render_table(r) or "the store holds 3" in render_table(r)
