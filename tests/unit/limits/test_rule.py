"""THE rule of the limits ledger (harpd.limits.rule): floors of failures, escalations, and newer hands win."""

from __future__ import annotations

import math

from harpd.limits.rule import DECISION, ESCALATE, LIFT, RESIZE, Entry, Floor, RanOut, floor_of, judge

JOB_53 = (
    Entry(1, DECISION, "mem", 541, 10.0, "history"),
    Entry(2, ESCALATE, "mem", 1082, 20.0, "ran out of mem", 541),
    Entry(3, ESCALATE, "mem", 2000, 30.0, "ran out of mem", 1082),
)


def test_the_attempts_own_escalation_is_its_floor_and_a_lowering_from_an_older_view_is_refused():
    floor = floor_of("mem", JOB_53, (), 3, 2000)
    assert floor.value == 2000 and "escalation of attempt 3" in floor.reason
    v = judge(RESIZE, "mem", 2000, 541, 5.0, JOB_53, floor, 2000)
    assert v.refused and v.value is None
    assert (
        v.why
        == "re-size 2000 -> 541 refused: it conflicts with the newer escalation of attempt 3 to 2000 (ran out of mem)"
    )


def test_a_failure_of_the_task_or_a_sibling_is_a_floor_above_its_size_within_the_request():
    runs = (RanOut("52", "mem", 700, 40.0), RanOut("51", "mem", 300, 35.0))
    f = floor_of("mem", (), runs, 1, 4000)
    assert f.value == 1400 and "52 ran out of mem at 700" in f.reason  # recovery's next size after the largest
    assert floor_of("mem", (), runs, 1, 1000).value == 1000  # never above the request
    assert floor_of("mem", (), (RanOut("9", "mem", 1000, 1.0),), 1, 1000).value == 1000  # failed at the request: kept
    v = judge(RESIZE, "mem", 800, 541, 0.0, (), f, 4000)
    assert v.value == 1400 and not v.refused and "raised to the floor of 1400" in v.why
    lift = judge(RESIZE, "mem", 541, None, 0.0, (), f, 4000)  # no proposal: the floor still lifts it
    assert lift.value == 1400


def test_a_later_completion_using_less_releases_a_failure_but_an_earlier_one_does_not():
    oom = RanOut("1", "mem", 1000, 100.0)
    assert floor_of("mem", (), (oom, RanOut("2", "mem", 2000, 200.0, True, 400)), 1, None).value is None
    assert floor_of("mem", (), (oom, RanOut("2", "mem", 2000, 50.0, True, 400)), 1, None).value == 2000
    later = floor_of("mem", (), (oom, RanOut("2", "mem", 2000, 200.0, True, 1500)), 1, None).value
    assert math.isclose(later, 1650)  # it used more: 1.1 x what it used
    assert floor_of("time", (), (RanOut("3", "time", 300, 1.0),), 1, 3600).value == 600


def test_raises_are_never_conflicts_and_a_hands_own_newer_entries_are_not_either():
    entries = (*JOB_53, Entry(3, LIFT, "mem", 2500, 40.0, "floor", 2000))
    assert judge(RESIZE, "mem", 2000, 3000, 5.0, entries, Floor(None), 4000).value == 3000
    assert judge(LIFT, "mem", 2500, 2200, 35.0, entries, Floor(None), 4000).value == 2200
    assert judge(RESIZE, "mem", 2000, 9000, 50.0, (), Floor(None), 4000).value == 4000  # within the request
    assert judge(RESIZE, "mem", 2000, 2000, 50.0, (), Floor(None), 4000).value is None


def test_bad_values_are_ignored_never_a_traceback():
    runs = (RanOut("x", "mem", math.nan, 1.0), RanOut("y", "mem", -5, 1.0), RanOut("z", "mem", "lots", 1.0))
    assert floor_of("mem", (Entry(1, ESCALATE, "mem", math.inf, 1.0),), runs, 1, 2000).value is None
    assert floor_of("cpus", JOB_53, (), 3, 8).value is None  # a resource no failure floors
    v = judge(RESIZE, "mem", math.nan, 500, 0.0, (), Floor(None), 2000)
    assert v.refused and "no current mem" in v.why
    assert judge(RESIZE, "mem", 1000, math.nan, 0.0, (), Floor(None), None).value is None


def test_later_completions_above_a_failure_bring_its_floor_down_to_what_they_used_never_to_the_failed_size():
    oom = RanOut("1", "mem", 541, 100.0)
    grown = RanOut("2", "mem", 2000, 200.0, True, 1330)
    assert floor_of("mem", (), (oom,), 1, 2000).value == 1082
    assert math.isclose(floor_of("mem", (), (oom, grown), 1, 2000).value, 1463)  # 1.1 x 1330, under the request
    close = RanOut("3", "mem", 2000, 300.0, True, 545)
    assert floor_of("mem", (), (oom, close), 1, 2000).value > 541  # never the size that failed
