"""The scoreboard shows what picks the champion (score, under-prediction rate) and whole headers."""

import re

import numpy as np
from report_helpers import NOW, job

from harpd.records import ModelRow
from harpd.replay.metric import ModelMetrics
from harpd.report.aggregate import build_report
from harpd.report.columns import columns_for, from_records
from harpd.report.render_html import render as render_html
from harpd.report.render_table import WIDTH
from harpd.report.render_table import render as render_table
from harpd.report.scoreboard import from_models_table, live_table
from harpd.report.window import Window


def metrics(model, score, under):
    """A full score dict, as harpd.training.champions stores it."""
    return ModelMetrics(
        model=model,
        jobs=900,
        changed=0.8,
        under_rate=under,
        under_jobs=9,
        lost=0,
        reserved_over_used=1.6,
        over_reservation=1e6,
        over_vs_request=0.4,
        consumed_over_used=1.2,
        consumed_vs_request=0.7,
        killed=1e4,
        score=score,
    ).to_dict()


MODELS = [
    ModelRow(1, "harp", "time", 1.0, 900, metrics("harp", 0.81, 0.04), True, "/m/harp"),
    ModelRow(2, "gbm", "time", 1.0, 900, metrics("gbm", 0.64, 0.11), False, "/m/gbm"),
    ModelRow(3, "request", "time", 1.0, 900, metrics("request", 2.5, 0.01), False, "/m/request"),
]


def test_trained_table_has_score_and_under_rate_first():
    t = from_models_table(MODELS)
    assert t["columns"][:3] == ["n_train", "score", "under_rate"]
    rows = {r["name"]: r for r in t["rows"]}
    assert rows["gbm"]["score"] == 0.64 and rows["gbm"]["under_rate"] == 0.11


def test_table_headers_are_whole_and_numbers_are_shown():
    r = build_report(from_records([job("1")], columns_for("user")), by="user", window=Window(None, None), now=NOW)
    r.scoreboard = {"tables": [from_models_table(MODELS)], "notes": []}
    text = render_table(r)
    assert max(len(x) for x in text.splitlines()) <= WIDTH
    board = text[text.index("Model scoreboard") :]
    head = " ".join(board.splitlines()[2:4])  # the header, wrapped over two lines
    for word in ("model", "res", "trained on", "score", "under rate", "over/req", "used/req"):
        assert word in head
    assert not re.search(r"consumed_o\b", text)
    gbm = next(x for x in board.splitlines() if x.strip().startswith("gbm"))
    assert "0.64" in gbm and "11.0%" in gbm  # its score and under-prediction rate
    html = render_html(r)
    assert "<th>score</th>" in html and "<th>under rate</th>" in html


def test_live_table_has_the_under_rate():
    recs = [job(str(i), harp_sized=True, req_time_s=3600.0, used_time_s=1800.0 + i) for i in range(6)]
    jobs = from_records(recs, columns_for("user"))
    n = len(recs)
    orig = {"time_s": np.full(n, 7200.0), "mem_mb": np.full(n, 8192.0), "cpus": np.full(n, 4.0)}
    t = live_table(jobs, np.array(["harp"] * n, dtype=object), orig, alpha_time=0.05, alpha_mem=0.05, max_attempts=3)
    assert "under_rate" in t["columns"] and "score" in t["columns"]
    assert all(r["under_rate"] == 0.0 for r in t["rows"] if r["resource"] == "time")
