"""EASY backfilling schedules computed by hand, then the same engine against a naive oracle.

Every hand case states the machine, the jobs as (submit, processors,
runtime, limit) and why each job starts when it does.
"""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from harpd.simulate import LimitPolicy, Workload, simulate
from tests.unit.simulate.easy_reference import reference_easy


def run(jobs, procs, mode="hard", hook=None, progress=None):
    submit, width, runtime, limit = (list(c) for c in zip(*jobs))
    return simulate(Workload(submit, width, runtime), LimitPolicy(limit, mode, hook), procs, progress=progress)


def double(_j, limit, _events):
    return 2.0 * limit


def test_plain_fcfs_when_nothing_can_backfill():
    # P=4.  J0 takes the whole machine until 10.  J1 (2 procs) is blocked:
    # shadow 10.  J2 (3 procs) cannot backfill (no free processor), and at 10
    # it is behind J1: 2 + 3 > 4, so it waits for J1's end at 15.
    s = run([(0, 4, 10, 10), (1, 2, 5, 5), (2, 3, 1, 1)], 4)
    assert s.start.tolist() == [0, 10, 15]
    assert s.end.tolist() == [10, 15, 16]


def test_backfill_before_the_reservation_and_on_the_extra_processors():
    # P=4.  J0 holds 3 until 10.  J1 (2) is blocked: shadow 10, extra 4-2=2.
    # J2 (1 proc, limit 8) arrives at 2: 2+8 = 10 <= shadow, it backfills.
    # J3 (1 proc, limit 8) arrives at 3: 3+8 > 10, and no processor is free.
    # J2 ends at 6: 6+8 = 14 > 10, but 1 <= extra: J3 starts on an extra
    # processor and runs past the shadow time (to 14) without delaying J1.
    s = run([(0, 3, 10, 10), (1, 2, 5, 5), (2, 1, 4, 8), (3, 1, 8, 8)], 4)
    assert s.start.tolist() == [0, 10, 2, 6]
    assert s.end.tolist() == [10, 15, 6, 14]


def test_a_backfill_that_would_delay_the_head_must_not_start():
    # P=4.  J0 holds 3 until 10; J1 needs the whole machine: shadow 10,
    # extra 0.  J2 (1 proc, limit 9) would run to 11 on the processor J1
    # needs at 10: it must not start although a processor is free.  J3
    # arrives at the same instant with limit 8: 2+8 = 10, it may.
    s = run([(0, 3, 10, 10), (1, 4, 5, 5), (2, 1, 3, 9), (2, 1, 3, 8)], 4)
    assert s.start.tolist() == [0, 10, 15, 2]
    assert s.summary().delayed_starts == 0


def test_extra_processors_are_used_up_by_long_backfills():
    # P=4.  J0 holds 2 until 10.  J1 (3) blocked: shadow 10, extra 1.  J2
    # (1 proc, limit 100) takes the extra processor at 2; J3 (same) at 3
    # finds a free processor but no extra one left, and waits.  At 10 J1
    # starts (1 + 3 = 4) and J3, now head, waits for J1's end at 15.
    s = run([(0, 2, 10, 10), (1, 3, 5, 5), (2, 1, 50, 100), (3, 1, 50, 100)], 4)
    assert s.start.tolist() == [0, 10, 2, 15]


def test_kill_at_the_limit_then_resubmission_behind_the_queue():
    # P=2.  J0 (2 procs, runs 30) is submitted with limit 10: killed at 10,
    # resubmitted at 10 with limit 20, *behind* J1 (queued at 5).  J1 starts
    # at 10 and ends at 15; J0 starts at 15, is killed at 35, comes back with
    # limit 40 and, alone, starts at once and completes at 65.
    calls = []

    def escalate(j, limit, events):
        calls.append((j, limit, events))
        return 2.0 * limit

    s = run([(0, 2, 30, 10), (5, 1, 5, 5)], 2, "hard", escalate)
    assert s.first_start.tolist() == [0, 10]
    assert s.start.tolist() == [35, 10]
    assert s.end.tolist() == [65, 15]
    assert s.kills.tolist() == [2, 0]
    assert s.runs.tolist() == [3, 1]
    assert calls == [(0, 10.0, 0), (0, 20.0, 1)]
    m = s.summary()
    assert m.kills == 2 and m.delayed_by_kill == 1 and m.abandoned == 0
    assert s.wait.tolist() == [35, 5]  # from the original submission
    # processors held: J0 2*(10+20+30), J1 1*5; useful: only the runs that completed
    assert s.busy_proc_s == 125 and s.useful_proc_s == 65


def test_kill_without_resubmission_abandons_the_job():
    s = run([(0, 1, 30, 10), (0, 1, 10, 10)], 1)
    assert s.start.tolist() == [0, 10]
    assert s.end.tolist() == [10, 20]
    assert s.completed.tolist() == [False, True]
    assert s.summary().abandoned == 1


def test_runtime_equal_to_the_limit_completes():
    s = run([(0, 1, 10, 10)], 1, "hard", double)
    assert s.kills.tolist() == [0] and s.completed.tolist() == [True]


def test_soft_extension_moves_the_heads_reservation():
    # P=4.  J0 (3 procs, runs 20, limit 10, soft).  J1 (2) blocked at 1:
    # shadow 10 (J0's planned end), promised start 10.  J2 (1 proc, limit 8)
    # backfills at 2 (2+8 = 10).  At 10 J0 reaches its limit and is extended
    # to 20: J1's reservation moves to 20, so J3 (1 proc, limit 9) arriving at
    # 11 backfills (11+9 = 20), which the old plan would not have allowed
    # past 10.  J1 starts at 20, later than promised: one delayed start.
    s = run([(0, 3, 20, 10), (1, 2, 5, 5), (2, 1, 8, 8), (11, 1, 9, 9)], 4, "soft", double)
    assert s.start.tolist() == [0, 20, 2, 11]
    assert s.end.tolist() == [20, 25, 10, 20]
    assert s.extensions.tolist() == [1, 0, 0, 0]
    assert s.promised_start[1] == 10
    m = s.summary()
    assert m.extensions == 1 and m.kills == 0
    assert m.delayed_by_extension == 1 and m.delayed_starts == 1


def test_soft_limit_refused_kills_the_job():
    s = run([(0, 1, 30, 10)], 1, "soft", lambda j, lim, e: None)
    assert s.end.tolist() == [10] and s.kills.tolist() == [1] and s.extensions.tolist() == [0]


def test_a_new_limit_must_grow():
    with pytest.raises(ValueError, match="must exceed"):
        run([(0, 1, 30, 10)], 1, "hard", lambda j, lim, e: lim)


def test_wait_slowdown_utilization_arithmetic():
    # the FCFS case above: waits 0, 9, 13; runs 10, 5, 1
    s = run([(0, 4, 10, 10), (1, 2, 5, 5), (2, 3, 1, 1)], 4)
    m = s.summary()
    assert s.wait.tolist() == [0, 9, 13]
    # (wait + run) / max(run, 10): 10/10, 14/10, 14/10
    assert s.bounded_slowdown.tolist() == pytest.approx([1.0, 1.4, 1.4])
    assert m.mean_wait_s == pytest.approx(22 / 3)
    assert m.mean_bounded_slowdown == pytest.approx(3.8 / 3)
    assert m.p95_wait_s == pytest.approx(12.6)  # 9 + 0.9 * (13 - 9)
    # 4*10 + 2*5 + 3*1 processor-seconds over 4 processors * 16 s
    assert m.makespan_s == 16 and m.utilization == pytest.approx(53 / 64)


def test_slowdown_of_a_long_job_uses_its_runtime():
    s = run([(0, 1, 100, 100), (10, 1, 20, 20)], 1)
    assert s.start.tolist() == [0, 100]
    assert s.bounded_slowdown.tolist() == pytest.approx([1.0, (90 + 20) / 20])


def test_too_wide_jobs_are_rejected_not_fatal():
    s = run([(0, 5, 10, 10), (0, 2, 10, 10), (1, 4, 1, 1)], 4)
    assert s.rejected.tolist() == [True, False, False]
    assert math.isnan(s.start[0])
    assert s.start.tolist()[1:] == [0, 10]
    m = s.summary()
    assert m.rejected == 1 and m.jobs == 2


def test_zero_runtime_jobs_pass_through():
    s = run([(0, 1, 0, 1), (0, 1, 5, 5)], 1)
    assert s.start.tolist() == [0, 0] and s.end.tolist() == [0, 5]


def test_progress_reports_the_end():
    seen = []
    run([(i, 1, 1, 1) for i in range(10)], 1, progress=lambda d, t: seen.append((d, t)))
    assert seen[-1] == (10, 10)


def test_input_validation():
    with pytest.raises(ValueError):
        LimitPolicy([0.0])
    with pytest.raises(ValueError):
        Workload([0.0], [0], [1.0])
    with pytest.raises(ValueError):
        simulate(Workload([0.0], [1], [1.0]), LimitPolicy([1.0, 2.0]), 4)


def _random_jobs(rng: random.Random, n: int, procs: int):
    jobs = []
    for _ in range(n):
        jobs.append((rng.randint(0, 300), rng.randint(1, procs + 2), rng.randint(0, 60), rng.randint(1, 70)))
    return jobs


@pytest.mark.parametrize("mode", ["hard-resubmit", "hard-abandon", "soft", "exact"])
@pytest.mark.parametrize("seed", range(12))
def test_engine_matches_the_naive_oracle(mode, seed):
    rng = random.Random(seed * 7919 + len(mode))
    procs = rng.choice([1, 3, 8, 16])
    jobs = _random_jobs(rng, 80, procs)
    if mode == "exact":
        jobs = [(s, w, r, max(r, 1)) for s, w, r, _ in jobs]

    def escalate(_j, limit, _events):
        return None if limit >= 200 else min(2.0 * limit, 200.0)

    kind = "soft" if mode == "soft" else "hard"
    hook = None if mode in ("hard-abandon", "exact") else escalate
    s = run(jobs, procs, kind, hook)
    submit, width, runtime, limit = (list(c) for c in zip(*jobs))
    ref = reference_easy(submit, width, runtime, limit, procs, kind, hook)

    def listed(a):
        return [None if math.isnan(x) else x for x in a.tolist()]

    assert listed(s.start) == ref["start"]
    assert listed(s.first_start) == ref["first_start"]
    assert listed(s.end) == ref["end"]
    assert listed(s.promised_start) == ref["promised"]
    assert s.kills.tolist() == ref["kills"]
    assert s.extensions.tolist() == ref["exts"]
    if kind == "hard":
        # with limits enforced exactly EASY keeps every promise
        assert s.summary().delayed_by_extension == 0


def test_long_queue_stays_exact():
    # a queue thousands deep (one processor, many jobs) exercises compaction
    rng = random.Random(5)
    jobs = [(rng.randint(0, 50), rng.randint(1, 4), rng.randint(1, 30), rng.randint(1, 40)) for _ in range(1500)]
    s = run(jobs, 4, "hard", lambda j, lim, e: None if lim >= 64 else 2.0 * lim)
    submit, width, runtime, limit = (list(c) for c in zip(*jobs))
    ref = reference_easy(submit, width, runtime, limit, 4, "hard", lambda j, lim, e: None if lim >= 64 else 2.0 * lim)
    assert s.start.tolist() == ref["start"]
    assert s.end.tolist() == ref["end"]
    assert np.all(s.end >= s.start)


# -- harpd's watcher: extensions at its first look within the lead of the limit ---------------


def watched(jobs, procs, lead, look, hook=double):
    submit, width, runtime, limit = (list(c) for c in zip(*jobs))
    pol = LimitPolicy(limit, "soft", hook, lead_s=lead, look_s=look)
    return simulate(Workload(submit, width, runtime), pol, procs)


def test_a_limit_shorter_than_the_lead_is_extended_at_the_first_look():
    # the real-cluster finding: limit 60 s, lead 120 s, looks every 30 s.  The
    # job (runtime 50 s, within its limit) is still running at the look at
    # 30 s, so the watcher extends it although it would have ended in time.
    s = watched([(0, 1, 50, 60)], 1, lead=120, look=30)
    assert s.extensions.tolist() == [1]
    assert s.end.tolist() == [50]


def test_a_limit_above_lead_and_interval_is_extended_only_if_still_running_at_the_look():
    # limit 300 s, lead 120 s: the first look after 180 s is at 210 s.  A run
    # of 200 s ends before it (no extension), one of 250 s is extended there,
    # before its limit (the planner sees 600 s from 210 s on).
    s = watched([(0, 1, 200, 300), (0, 1, 250, 300)], 2, lead=120, look=30)
    assert s.extensions.tolist() == [0, 1]
    assert s.end.tolist() == [200, 250]
    assert s.kills.tolist() == [0, 0]


def test_a_watched_job_at_its_request_runs_into_it_and_is_killed_there():
    # the hook refuses (already at the request): the watcher does nothing, the
    # job is killed at its limit (300 s), not at the look (210 s)
    s = watched([(0, 1, 1000, 300)], 1, lead=120, look=30, hook=lambda j, lim, ev: None)
    assert s.extensions.tolist() == [0]
    assert s.kills.tolist() == [1]
    assert s.end.tolist() == [300]


def test_the_lead_changes_the_plan_other_jobs_see():
    # P=1.  J0 (limit 300, runtime 250) holds the machine; J1 (limit 40)
    # arrives at 5.  Without a watcher J0 is extended at 300, after it ended:
    # never; J1 starts at 250.  With lead 120 and looks every 30 s, J0 is
    # extended at 210 (to 600): the same start for J1, one extension more.
    plain = run([(0, 1, 250, 300), (5, 1, 10, 40)], 1, mode="soft", hook=double)
    lead = watched([(0, 1, 250, 300), (5, 1, 10, 40)], 1, lead=120, look=30)
    assert plain.extensions.tolist() == [0, 0] and lead.extensions.tolist() == [1, 0]
    assert plain.start.tolist() == lead.start.tolist() == [0, 250]
