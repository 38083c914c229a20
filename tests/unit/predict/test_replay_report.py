"""`harp replay`'s report stays typed up to the renderer; its JSON keeps the keys scripts read."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from harpd.cli.replay_report import Verdict
from harpd.cli.replay_verdict import verdict, with_queue
from tests.unit.predict.replay_helpers import metric_row as _row
from tests.unit.predict.replay_helpers import replay_report as _report

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
