"""The simulator's saved figures beside the store."""

from __future__ import annotations

import json

import pytest

from harpd.report.queue_figures import load, path_beside, save


def test_saved_figures_round_trip_beside_the_store(tmp_path):
    target = path_beside(tmp_path / "harp.db")
    assert target == tmp_path / "harp.queue.json"
    assert load(target) is None  # none yet
    save(target, {"procs": 4, "policies": [{"policy": "users", "mean_wait_s": None}]})
    assert load(target)["policies"][0]["policy"] == "users"
    assert [p.name for p in tmp_path.iterdir()] == ["harp.queue.json"]  # no temporary left behind


def test_saved_figures_refuse_nan_and_ignore_foreign_files(tmp_path):
    target = tmp_path / "q.json"
    with pytest.raises(ValueError):
        save(target, {"policies": [{"mean_wait_s": float("nan")}]})
    assert not target.exists() and list(tmp_path.iterdir()) == []
    target.write_text(json.dumps({"something": "else"}))
    assert load(target) is None
    with pytest.raises(OSError):
        save(tmp_path / "missing" / "q.json", {"policies": []})
