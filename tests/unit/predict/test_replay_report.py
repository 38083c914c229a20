"""`harp replay`'s report stays typed up to the renderer; its JSON keeps the keys scripts read."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from harpd.cli.replay_report import ReplayReport, Verdict
from harpd.cli.replay_verdict import verdict, with_queue
from harpd.predict.metric import ModelMetrics

VERDICT_KEYS = [
    "model",
    "limits",
    "unit",
    "reserved_saved",
    "reserved_saved_share",
    "over_reservation_vs_users",
    "consumed_vs_users",
    "consumed_extra",
    "killed_jobs",
    "killed",
    "harp_kills",
    "harp_killed",
    "users_kills",
    "lost",
    "extended_jobs",
    "missed_share",
    "score",
    "users_score",
    "better",
    "margin",
    "text",
]


def _row(model: str, over: float, score: float, **kw) -> ModelMetrics:
    base = dict(
        model=model,
        jobs=100,
        changed=0.5,
        under_rate=0.01,
        under_jobs=1,
        lost=0,
        reserved_over_used=1.5,
        over_reservation=over,
        over_vs_request=over / 7200.0,
        consumed_over_used=1.1,
        consumed_vs_request=0.9,
        killed=3600.0,
        score=score,
        used_total=10 * 3600.0,
        killed_jobs=2,
    )
    base.update(kw)
    return ModelMetrics(**base)


def _report(*rows: ModelMetrics, relative: bool = True) -> ReplayReport:
    return ReplayReport(
        trace="t.swf",
        source="t",
        resource="time",
        relative=relative,
        jobs=100,
        skipped={},
        retrains=1,
        seconds=1.0,
        alpha=0.05,
        weight="cores",
        unit="core-hours",
        unit_scale=3600.0,
        models=rows,
        targets={},
        notes=[],
        limits="hard",
        soft_policy=None,
    )


def test_the_verdict_reads_the_typed_rows_and_prints_the_same_json_keys():
    rep = _report(_row("request", 7200.0, 0.9), _row("harp", 3600.0, 0.5))
    v = verdict(rep)
    assert v.better == "harp" and v.reserved_saved == pytest.approx(1.0) and v.killed == pytest.approx(1.0)
    assert v.text[0].startswith("verdict: harp would have been")
    d = v.to_dict()
    assert list(d) == VERDICT_KEYS and isinstance(d["text"], list)
    q = {"replicas": 1, "procs": 8, "notes": [], "policies": [], "vs_users": {}}
    queued = with_queue(v, q, "hard").to_dict()
    assert list(queued) == VERDICT_KEYS + ["queue"] and queued["text"][0].startswith("queue: no harp-hard row")
    out = json.loads(json.dumps(dataclasses.replace(rep, verdict=v).to_dict()))
    assert [m["model"] for m in out["models"]] == ["request", "harp"] and out["verdict"]["better"] == "harp"


def test_no_verdict_keeps_its_short_shape_and_json_has_no_nan():
    assert Verdict.none("why").to_dict() == {"better": None, "text": ["no verdict: why"]}
    rep = _report(_row("request", 7200.0, math.nan), _row("harp", 3600.0, 0.5, over_vs_request=math.inf))
    v = verdict(rep)
    assert v.better is None and v.text[0] == "verdict: none (no score to compare on this trace)."
    assert v.over_reservation_vs_users is None  # a non-finite figure reads as not measured
    text = json.dumps(_report(*rep.models).to_dict(), allow_nan=False)  # raises on a NaN left in
    assert '"score": null' in text
    assert verdict(_report(*rep.models, relative=False)).text == (
        "no verdict: this trace has no users' requests to compare harp with",
    )
