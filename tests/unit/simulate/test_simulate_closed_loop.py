"""The closed loop: a job's limit asked for at its submission, with the simulated queue of that moment.

Hand cases state the machine, the jobs as (submit, processors, runtime,
limit) and what the queue holds at each submission; a random trace checks
that asking for the limit the job already had changes nothing.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from harpd.simulate import LimitPolicy, Workload, simulate


def _work(jobs):
    submit, width, runtime, limit = (list(c) for c in zip(*jobs))
    return Workload(submit, width, runtime), np.array(limit, float)


def test_each_job_is_asked_once_with_the_queue_of_its_submission():
    # P=2.  J0 (2 procs) runs 0-10.  J1 (1 proc) arrives at 1: nothing queued,
    # J0 running; the hook gives it 20 and it waits (no processor free).  J2 (2
    # procs) arrives at 2: J1 queued with 1 x 20 processor-seconds, J0 running.
    # J3 arrives at 30 when everything is done: an empty queue, nothing running.
    work, limit = _work([(0, 2, 10, 10), (1, 1, 5, 7), (2, 2, 5, 9), (30, 1, 1, 4)])
    seen = []

    def ask(j, pending, backlog, running, now):
        seen.append((j, pending, backlog, running, now))
        return {0: 10.0, 1: 20.0, 2: 5.0, 3: 4.0}[j]

    s = simulate(work, LimitPolicy(limit, "hard", on_submit=ask), 2)
    assert seen == [(0, 0, 0.0, 0, 0.0), (1, 0, 0.0, 1, 1.0), (2, 1, 20.0, 1, 2.0), (3, 0, 0.0, 0, 30.0)]
    # J1 starts at 10 with its decided limit 20: J2 (whole machine) waits for it until 15
    assert s.start.tolist() == [0, 10, 15, 30]


def test_a_resubmission_is_not_asked_again_and_keeps_the_escalated_limit():
    # P=1, hard limits.  J0 is given 4 at submission, killed at 4 and resubmitted
    # by on_limit with 8: only its first submission asks; it completes 4-10.
    work, limit = _work([(0, 1, 6, 100)])
    asked = []

    def ask(j, *_queue):
        asked.append(j)
        return 4.0

    s = simulate(work, LimitPolicy(limit, "hard", lambda _j, lim, _e: 2 * lim, on_submit=ask), 1)
    assert asked == [0]
    assert (s.kills.tolist(), s.start.tolist(), s.end.tolist()) == ([1], [4.0], [10.0])


def test_the_backlog_counts_the_decided_limits_and_forgets_started_jobs():
    # P=1.  J0 runs 0-10; J1..J3 arrive at 1, 2, 3 and queue: each sees the
    # processor-seconds of the ones before it (limits 5, 6, 7).  J4 arrives at 11,
    # after J1 started at 10: J2 and J3 wait, 6 + 7.
    work, limit = _work([(0, 1, 10, 10), (1, 1, 5, 5), (2, 1, 6, 6), (3, 1, 7, 7), (11, 1, 1, 1)])
    backlogs = {}

    def ask(j, pending, backlog, _running, _now):
        backlogs[j] = (pending, backlog)
        return float(limit[j])

    simulate(work, LimitPolicy(limit, "hard", on_submit=ask), 1)
    assert backlogs == {0: (0, 0.0), 1: (0, 0.0), 2: (1, 5.0), 3: (2, 11.0), 4: (2, 13.0)}


def test_asking_for_the_same_limits_changes_nothing():
    rng = random.Random(7)
    jobs = []
    for i in range(300):
        rt = rng.randint(1, 400)
        jobs.append((i * rng.randint(1, 30), rng.randint(1, 8), rt, rt + rng.randint(0, 500)))
    work, limit = _work(jobs)
    hook = lambda j, _l, _e: 2 * _l  # noqa: E731
    for mode in ("hard", "soft"):
        open_ = simulate(work, LimitPolicy(limit, mode, hook), 8)
        closed = simulate(work, LimitPolicy(limit, mode, hook, on_submit=lambda j, *_q: float(limit[j])), 8)
        assert closed.start.tolist() == open_.start.tolist(), mode
        assert closed.end.tolist() == open_.end.tolist(), mode


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf")])
def test_a_decision_that_is_no_limit_is_refused(bad):
    work, limit = _work([(0, 1, 5, 5)])
    with pytest.raises(ValueError, match="on_submit returned"):
        simulate(work, LimitPolicy(limit, "hard", on_submit=lambda *_a: bad), 1)
