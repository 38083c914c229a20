"""The simulator's small I/O helpers: the progress bar and the saved figures."""

from __future__ import annotations

import io
import json

import pytest

from harpd.report.queue_figures import load, path_beside, save
from harpd.simulate.progress import TextBar


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_bar_draws_on_a_terminal_and_ends_with_a_newline():
    out = Tty()
    bar = TextBar("users", out)
    bar(5, 10)
    assert out.getvalue().startswith("\rusers") and " 50%|" in out.getvalue() and "\n" not in out.getvalue()
    bar(10, 10)
    assert " 100%|" in out.getvalue() and out.getvalue().endswith("\n")


def test_bar_is_silent_off_a_terminal_or_when_disabled():
    for out, enabled in ((io.StringIO(), True), (Tty(), False)):
        TextBar("x", out, enabled=enabled)(1, 2)
        assert out.getvalue() == ""


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
