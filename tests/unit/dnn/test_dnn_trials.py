"""Convergence-aware trials (Hermes): study ranking to nice, successive halving stops, the #HARP study line."""

from __future__ import annotations

import pytest

from harpd.dnn.errors import DnnError
from harpd.dnn.trials import (
    ProgressReport,
    StudyPolicy,
    Trial,
    decide_trials,
    parse_metric,
    parse_study,
    sha_stops,
    study_rates,
    trial_rate,
)


def curve(job: str, study: str, values: list[float], step_s: float = 1800.0) -> list[ProgressReport]:
    return [ProgressReport(job, study, "loss", v, (i + 1) * step_s) for i, v in enumerate(values)]


def test_trial_rate_is_relative_improvement_per_hour():
    rs = curve("1_0", "a", [1.0, 0.8, 0.5])  # 50% in one hour
    assert trial_rate(rs) == pytest.approx(0.5)
    assert trial_rate(rs, lower_is_better=False) == pytest.approx(-0.5)
    assert trial_rate(rs[:1]) is None


def test_fastest_study_gets_nice_zero_slowest_max():
    reports = curve("1_0", "fast", [1.0, 0.5]) + curve("2_0", "mid", [1.0, 0.8]) + curve("3_0", "slow", [1.0, 0.95])
    trials = [
        Trial("1_1", "fast", 500, "PENDING", 7),
        Trial("2_1", "mid", 500, "PENDING"),
        Trial("3_1", "slow", 500, "PENDING"),
        Trial("3_0", "slow", 500, "RUNNING"),
    ]
    acts = {a.job_id: a for a in decide_trials(trials, reports, {}, max_nice=1000)}
    assert acts["1_1"].nice == 0 and acts["2_1"].nice == 500 and acts["3_1"].nice == 1000
    assert "3_0" not in acts  # running trials keep their nice
    assert not any(a.stop for a in acts.values())  # no study opted in to stopping


def test_studies_are_ranked_per_owner_and_unrated_ones_left_alone():
    reports = curve("1_0", "a", [1.0, 0.5]) + curve("2_0", "b", [1.0, 0.9])
    trials = [Trial("1_1", "a", 1, "PENDING"), Trial("2_1", "b", 2, "PENDING", 5), Trial("9_1", "new", 1, "PENDING", 5)]
    acts = {a.job_id: a for a in decide_trials(trials, reports, {}, max_nice=1000)}
    # each owner has one rated study: nice 0 for both, whatever the other owner's speed
    assert "1_1" not in acts and acts["2_1"].nice == 0
    assert "9_1" not in acts


def test_successive_halving_stops_the_worst_two_thirds_at_a_rung():
    pol = StudyPolicy("s", stop="sha", eta=3, rung_s=3600.0)
    values = [0.2, 0.3, 0.4, 0.5, 0.6, 0.7]
    reports = [r for i, v in enumerate(values) for r in curve(f"5_{i}", "s", [1.0, v])]
    live = {f"5_{i}" for i in range(6)}
    stops = sha_stops(reports, pol, live)
    assert set(stops) == {"5_2", "5_3", "5_4", "5_5"}
    assert "rung 60 min" in stops["5_5"] and "best 2 of 6" in stops["5_5"]
    # too few at the rung: nothing stopped
    assert sha_stops(reports[:4], pol, live) == {}


def test_a_tie_at_the_rung_stops_nobody():
    # both trials report the same first loss before the rung: which is "worse" would be
    # decided by list order, so neither is stopped until their values differ
    pol = StudyPolicy("s", stop="sha", eta=2, rung_s=2.0)
    reports = [
        ProgressReport("15_0", "s", "loss", 1.0, 1.5),
        ProgressReport("15_1", "s", "loss", 1.0, 1.2),
        ProgressReport("15_0", "s", "loss", 1.0, 3.0),
        ProgressReport("15_1", "s", "loss", 1.0, 3.1),
    ]
    assert sha_stops(reports, pol, {"15_0", "15_1"}) == {}
    later = reports + [
        ProgressReport("15_0", "s", "loss", 0.2, 4.5),
        ProgressReport("15_1", "s", "loss", 0.6, 4.6),
        ProgressReport("15_0", "s", "loss", 0.2, 9.0),
        ProgressReport("15_1", "s", "loss", 0.6, 9.0),
    ]
    assert set(sha_stops(later, pol, {"15_0", "15_1"})) == {"15_1"}


def test_decide_stops_only_in_opted_in_studies_and_live_trials():
    reports = [r for i, v in enumerate([0.2, 0.5, 0.6]) for r in curve(f"5_{i}", "s", [1.0, v])] + [
        r for i, v in enumerate([0.2, 0.5, 0.6]) for r in curve(f"6_{i}", "t", [1.0, v])
    ]
    trials = [
        Trial("5_0", "s", 1, "RUNNING"),
        Trial("5_1", "s", 1, "RUNNING"),
        Trial("5_2", "s", 1, "PENDING"),
        Trial("6_1", "t", 1, "RUNNING"),
        Trial("6_2", "t", 1, "RUNNING"),
    ]
    pols = {"s": StudyPolicy("s", stop="sha", rung_s=3600.0), "t": StudyPolicy("t", rung_s=3600.0)}
    acts = decide_trials(trials, reports, pols)
    assert {a.job_id for a in acts if a.stop} == {"5_1", "5_2"}


def test_higher_is_better_metric():
    pol = StudyPolicy("s", metric="acc", lower_is_better=False, stop="sha", rung_s=3600.0)
    reports = [
        ProgressReport(f"7_{i}", "s", "acc", v, t)
        for i, v in enumerate([0.9, 0.5, 0.4])
        for t, v in ((1800.0, 0.1), (3600.0, v))
    ]
    assert set(sha_stops(reports, pol, {"7_0", "7_1", "7_2"})) == {"7_1", "7_2"}
    assert study_rates(reports, {"s": pol})["s"] > 0


def test_parse_study_line():
    pol = parse_study(["study=lr-sweep", "stop=sha", "eta=4", "rung=20m", "metric=acc", "mode=max"])
    assert pol == StudyPolicy("lr-sweep", "acc", False, "sha", 4, 1200.0)
    assert parse_study(["study=x"]).stop == "none"
    assert parse_study(["study=x", "rung=2s"]).rung_s == 2 and parse_study(["study=x", "rung=2"]).rung_s == 120
    for bad, word in (
        (["stop=sha"], "study=NAME"),
        (["study=x", "stop=hyperband"], "stop=hyperband"),
        (["study=x", "eta=1"], "eta=1"),
        (["study=x", "colour=red"], "unknown key colour"),
        (["study=x", "mode=up"], "mode=up"),
        (["study=x", "rung=soon"], "rung=soon is not a duration"),
        (["study=x", "rung=0s"], "1 second"),
        (["study=a b"], "study=NAME"),
    ):
        with pytest.raises(DnnError, match=word):
            parse_study(bad)


def test_parse_metric():
    assert parse_metric("loss=0.31") == ("loss", 0.31)
    for bad in ("loss", "loss=abc", "=1", "loss=nan", "a b=1"):
        with pytest.raises(DnnError, match="--metric"):
            parse_metric(bad)
