"""Checkpoint schedules (COCI-style, denser early) against Young/Daly, the site hazard, the line, the CLI."""

from __future__ import annotations

import math
import random

import pytest

from harpd.cli.main import main
from harpd.dnn.checkpoint import (
    checkpoint_tokens,
    coci_schedule,
    constant_hazard,
    even_schedule,
    explain_checkpoint,
    failure_trace,
    hazard_from_jobs,
    resumable,
    simulate,
    spec_from_tokens,
    value_density,
    young_daly,
)
from harpd.dnn.errors import DnnError


def test_young_daly_matches_the_formula():
    # C = 5 min, M = 8 h: sqrt(2 C M) = 69.3 min, Daly's correction adds a little and takes C off
    tau = young_daly(300, 1 / 8)
    young = math.sqrt(2 * 300 * 8 * 3600)
    assert young - 300 < tau < young
    assert young_daly(7200, 1.0) == 3600.0  # C >= 2M: checkpoint every M


def test_without_convergence_and_constant_hazard_it_is_even():
    sched = coci_schedule(300, constant_hazard(1 / 8), 24 * 3600, 0.0, 1800)
    gaps = {round(b - a, 6) for a, b in zip([0.0, *sched], sched)}
    assert len(gaps) == 1 and gaps.pop() == pytest.approx(math.sqrt(2 * 300 * 8 * 3600))


def test_convergence_makes_it_denser_early():
    sched = coci_schedule(300, constant_hazard(1 / 8), 48 * 3600, 0.5, 1800)
    gaps = [b - a for a, b in zip([0.0, *sched], sched)]
    assert all(g2 >= g1 for g1, g2 in zip(gaps, gaps[1:]))
    even = even_schedule(300, 1 / 8, 48 * 3600)
    assert gaps[0] < even[0] / 3 and gaps[-1] > even[0]


def test_value_density_has_mean_one():
    w = value_density(0.5, 1800, 48 * 3600)
    n = 20000
    h = 48 * 3600 / n
    assert sum(w((i + 0.5) * h) for i in range(n)) * h / (48 * 3600) == pytest.approx(1.0, rel=1e-3)


def test_hazard_by_age_from_jobs():
    jobs = (
        [("completed", 10 * 3600)] * 50
        + [("node_fail", 1800)] * 20
        + [("preempted", 8 * 3600)] * 2
        + [("failed", 600)] * 5
    )  # a job's own failure is not an interruption
    hz = hazard_from_jobs(jobs)
    assert hz.events == 22
    assert hz.at(0) > hz.at(5 * 3600)  # 20 in the first hour, 2 later
    assert hz.at(0) == pytest.approx(20 / (50 + 20 * 0.5 + 2 + 5 * 600 / 3600))


def test_simulation_accounts_checkpoints_and_redo():
    w = value_density(0.0, 1800, 10 * 3600)
    # no failures: only checkpoint time
    r = simulate([3600.0 * i for i in range(1, 10)], 60.0, 10 * 3600.0, [], w)
    assert r.checkpoint_s == 9 * 60 and r.redo_s == 0
    # one failure 30 min after the first checkpoint was written: 30 min redone
    r = simulate([3600.0], 60.0, 2 * 3600.0, [3600.0 + 60 + 1800], w)
    assert r.redo_s == pytest.approx(1800.0) and r.checkpoint_s == 60.0


def test_even_is_no_worse_in_time_for_a_constant_rate():
    """The direction the bench reports: Young/Daly minimises time lost at a constant rate."""
    rng = random.Random(3)
    hz = constant_hazard(1 / 4)
    traces = [failure_trace(rng, 60 * 3600, hz.at) for _ in range(300)]
    w_flat = value_density(0.0, 1800, 24 * 3600)
    w = value_density(0.5, 1800, 24 * 3600)
    even = even_schedule(300, 1 / 4, 24 * 3600)
    dense = coci_schedule(300, hz, 24 * 3600, 0.5, 1800)
    t_even = sum(simulate(even, 300, 24 * 3600, t, w_flat).time_s for t in traces)
    t_dense = sum(simulate(dense, 300, 24 * 3600, t, w_flat).time_s for t in traces)
    v_even = sum(simulate(even, 300, 24 * 3600, t, w).weighted_s for t in traces)
    v_dense = sum(simulate(dense, 300, 24 * 3600, t, w).weighted_s for t in traces)
    assert t_even < t_dense and v_dense < v_even


def test_line_and_resumable_detection():
    lines = ["#HARP checkpoint cost=90s converge=0.7 horizon=12h rate=0.05"]
    spec = spec_from_tokens(checkpoint_tokens(lines))
    assert (spec.cost_s, spec.converge, spec.horizon_s, spec.rate_per_h) == (90, 0.7, 43200, 0.05)
    assert resumable(lines, None, None) == "#HARP checkpoint line"
    assert resumable([], 120, True) == "--signal (@120s) with --requeue"
    assert resumable([], 120, False) is None and resumable([], None, True) is None
    for bad, msg in (
        ("cost=0", "out of range"),
        ("cost=abc", "not a duration"),
        ("every=1h", "unknown key"),
        ("cost=1m converge=-1", "out of range"),
        ("cost=1m converge=nan", "out of range"),
    ):
        with pytest.raises(DnnError, match=msg):
            spec_from_tokens(checkpoint_tokens([f"#HARP checkpoint {bad}"]))


def test_explain_never_raises():
    assert explain_checkpoint(["#HARP dnn params=1e9"], 3600) is None
    ok = explain_checkpoint(["#HARP checkpoint cost=2m converge=0.5"], 24 * 3600)
    assert ok["resumable"] == "#HARP checkpoint line" and ok["checkpoints"] > 0 and ok["rate_from"] == "default 0.01/h"
    assert ok["first_min"] < ok["even_interval_min"]
    bad = explain_checkpoint(["#HARP checkpoint cost=forever"], 3600)
    assert "not a duration" in bad["error"]


def test_cli_checkpoint(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("HARP_CONFIG", str(tmp_path / "none.toml"))
    (tmp_path / "none.toml").write_text("")
    rc = main(["dnn", "checkpoint", "cost=2m", "horizon=24h", "converge=0.5", "rate=0.125"])
    out = capsys.readouterr().out
    assert rc == 0 and out.startswith("harp dnn checkpoint: ") and "even Young/Daly: every 42 min" in out
    rc = main(["dnn", "checkpoint", "cost=2m", "horizon=24h", "rate=lots"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "rate=lots is not a number" in err
