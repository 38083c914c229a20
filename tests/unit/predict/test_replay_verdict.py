"""`harp replay` says first, in plain words, whether harp would have beaten the users' own requests."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from replay_helpers import rec as _rec
from replay_helpers import write_swf as _write_swf

from harpd.cli.main import main as harp_main


def _trace(n: int, seed: int, switch: float) -> list:
    """Users who ask 4x what their jobs take; from ``switch`` (share of the trace) on, the jobs use it all.

    Before the switch harp learns to cut the requests; a trace that switches
    late punishes those cuts (kills) and leaves little time to save anything.
    """
    rng = np.random.default_rng(seed)
    recs, t = [], 0.0
    for i in range(n):
        u = int(rng.integers(0, 10))
        base = 300.0 * (u + 1)
        used = base * rng.uniform(0.8, 1.2) if i < switch * n else base * 4 * rng.uniform(0.9, 1.0)
        t += rng.exponential(60)
        recs.append(_rec(i, t, used, base * 4, user=f"u{u}"))
    return recs


@pytest.fixture(autouse=True)
def _hard_cuts(tmp_path, monkeypatch):
    """These verdicts judge harp's hard cuts: the kill-cost gate (default: none) opened."""
    cfg = tmp_path / "harp.toml"
    cfg.write_text(f'[store]\npath = "{tmp_path / "h.db"}"\n[predict]\nhard_cut_gain = 1.0\n')
    monkeypatch.setenv("HARP_CONFIG", str(cfg))


def _replay(tmp_path, capsys, recs, *argv: str) -> str:
    f = tmp_path / "t.swf"
    _write_swf(f, recs)
    assert harp_main(["replay", str(f), "--no-progress", "--models", "request,harp", *argv]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize(
    "switch,better,words",
    [
        (1.0, "harp", "verdict: harp would have been"),  # steady habits: harp learns them
        (0.85, "users", "verdict: the users' own requests would have been"),  # the habits change under harp
    ],
)
def test_the_verdict_comes_first_and_points_the_right_way(tmp_path, capsys, switch, better, words):
    recs = _trace(1200, 0, switch)
    d = json.loads(_replay(tmp_path, capsys, recs, "--format", "json"))
    v, rows = d["verdict"], {m["model"]: m for m in d["models"]}
    assert v["better"] == better
    # the direction agrees with the score both rows are ranked by
    assert (rows["harp"]["score"] < rows["request"]["score"]) == (better == "harp")
    assert v["over_reservation_vs_users"] == pytest.approx(rows["harp"]["over_vs_request"])
    assert v["killed_jobs"] >= (1 if better == "users" else 0)
    out = _replay(tmp_path, capsys, recs).splitlines()
    assert out[1].startswith(words)  # right under the one-line summary of the run
    assert any(ln.startswith("  reserved: ") and "core-hours" in ln for ln in out)
    assert any(ln.startswith("  killed: ") for ln in out) and any(ln.startswith("  consumed: ") for ln in out)


def test_no_verdict_without_both_rows_and_it_says_why(tmp_path, capsys):
    f = tmp_path / "t.swf"
    _write_swf(f, _trace(300, 1, 1.0))
    assert harp_main(["replay", str(f), "--quiet", "--models", "request,alea"]) == 0
    assert "no verdict: add harp and request to --models" in capsys.readouterr().out


def _header(out: str) -> list[str]:
    head = next(ln for ln in out.splitlines() if ln.startswith("model "))
    return re.split(r"\s{2,}", head.strip())


@pytest.mark.parametrize("limits", ["hard", "soft"])
def test_no_internal_issue_references_and_distinct_column_titles(tmp_path, capsys, limits):
    out = _replay(tmp_path, capsys, _trace(1200, 2, 1.0), "--limits", limits)
    assert not re.search(r"\bissue\b", out, re.I)
    assert "median trace" not in out and "target " not in out
    titles = _header(out)
    assert len(titles) == len(set(titles)), titles
    assert "over-res vs users" in titles and "consumed vs users" in titles
