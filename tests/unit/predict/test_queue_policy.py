"""The queue rule: under a queue that outlasts the request only the deep soft cuts stand (issue #48)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from harpd.evaluate.schedule_simulation import queue_decision
from harpd.predict.allocation import Guard
from harpd.predict.decide import TIME, KernelInput, allocation, decide
from harpd.predict.queue_policy import KEEP_SHARE, queue_cut
from harpd.predict.queue_view import QueueView


def view(backlog_core_s: float, cores: int = 100) -> QueueView:
    return QueueView(pending_jobs=3, backlog_core_s=backlog_core_s, running_jobs=5, now=0.0, total_cores=cores)


DEEP = view(100 * 7200.0)  # 100 cores x 7200 s waiting: the machine is busy for 7200 s
SHORT = view(100 * 1800.0)  # busy for 1800 s


def test_no_queue_keeps_every_cut():
    for limit in (600.0, 3000.0, 3500.0):
        c = queue_cut(view(0.0), request_s=3600.0, limit_s=limit)
        assert (c.limit_s, c.given_back) == (limit, 0.0)


def test_a_queue_shorter_than_the_request_keeps_a_shallow_cut():
    c = queue_cut(SHORT, request_s=3600.0, limit_s=3000.0)
    assert (c.limit_s, c.given_back) == (3000.0, 0.0)
    assert "drains within the request" in c.reason


def test_a_queue_longer_than_the_request_gives_a_shallow_cut_back():
    c = queue_cut(DEEP, request_s=3600.0, limit_s=3000.0)
    assert (c.limit_s, c.given_back) == (3600.0, 1.0)
    assert "planned with all the time it may run" in c.reason


def test_a_queue_longer_than_the_request_keeps_a_deep_cut():
    c = queue_cut(DEEP, request_s=3600.0, limit_s=600.0)
    assert (c.limit_s, c.given_back) == (600.0, 0.0)
    assert "deep cut" in c.reason


def test_the_line_between_shallow_and_deep_is_the_keep_share():
    at = queue_cut(DEEP, 3600.0, KEEP_SHARE * 3600.0)
    above = queue_cut(DEEP, 3600.0, KEEP_SHARE * 3600.0 + 1.0)
    assert at.limit_s == KEEP_SHARE * 3600.0
    assert above.limit_s == 3600.0


def test_the_line_between_short_and_deep_queues_is_the_request():
    # the machine busy for exactly the request counts as deep; a second less does not
    assert queue_cut(view(100 * 3600.0), 3600.0, 3000.0).limit_s == 3600.0
    assert queue_cut(view(100 * 3599.0), 3600.0, 3000.0).limit_s == 3000.0


def test_the_result_stays_between_the_limit_and_the_request():
    for b in (0.0, 1e3, 1e5, 1e6, 1e9):
        for limit in (60.0, 900.0, 2000.0, 3599.0):
            v = queue_cut(view(b), 3600.0, limit).limit_s
            assert v in (limit, 3600.0)


@pytest.mark.parametrize(
    ("v", "request_s", "limit"),
    [
        (view(1e9, cores=0), 3600.0, 3000.0),  # the cluster's size unknown: no depth to read
        (view(1e9), 3600.0, 3600.0),  # no cut
        (view(1e9), 3600.0, 5000.0),  # a limit above the request (harp raised it): nothing to give back
        (view(1e9), float("nan"), 3000.0),  # no request
        (view(1e9), 0.0, 3000.0),
    ],
)
def test_nothing_to_weigh_leaves_the_limit(v, request_s, limit):
    c = queue_cut(v, request_s, limit)
    assert (c.limit_s, c.given_back) == (limit, 0.0)


def test_the_view_says_how_long_the_machine_needs_for_the_waiting_work():
    assert view(1000.0, cores=10).drain_s == 100.0
    assert view(1000.0, cores=0).drain_s is None


# -- the same rule through the decision kernel and the closed-loop callback ----------------------

GUARD = Guard(min_history=0, floor=60.0, leave_alone_ratio=0.95, min_fraction=0.0)


def soft_input(need_s: float, queue: QueueView | None, soft: bool = True) -> KernelInput:
    return KernelInput(3600.0, math.log(need_s / 3600.0), 10, None, GUARD, soft=soft, queue=queue)


def test_the_kernel_keeps_the_request_for_a_shallow_soft_cut_under_a_deep_queue():
    assert allocation(TIME, soft_input(3000.0, None)).amount == 3000.0
    assert allocation(TIME, soft_input(3000.0, SHORT)).amount == 3000.0
    out = decide(TIME, soft_input(3000.0, DEEP))
    assert out.change is None and out.allocation.amount is None
    assert "planned with all the time it may run" in out.explanation.reason


def test_the_kernel_keeps_a_deep_soft_cut_under_a_deep_queue():
    alone = allocation(TIME, soft_input(600.0, None)).amount
    assert alone is not None and alone <= KEEP_SHARE * 3600.0
    out = decide(TIME, soft_input(600.0, DEEP))
    assert out.allocation.amount == alone
    assert out.change is not None


def test_the_kernel_weighs_the_cut_against_the_partition_limit_below_the_request():
    # request 3600 s, partition limit 3000 s, harp's bound 1500 s: half the limit, a shallow cut of it
    inp = KernelInput(3600.0, math.log(1500.0 / 3600.0), 10, 3000.0, GUARD, soft=True, queue=DEEP)
    a = allocation(TIME, inp)
    assert a.amount == 3000.0 and "planned with all the time it may run" in a.why


def test_the_kernel_reads_no_queue_under_hard_limits():
    assert allocation(TIME, soft_input(3000.0, DEEP, soft=False)).amount == 3000.0


def test_the_closed_loop_callback_decides_as_the_kernel():
    limits = np.array([3000.0, 600.0, 3600.0])
    req = np.array([3600.0, 3600.0, 3600.0])
    ruled = queue_decision(limits, req, None, queue_rule=True)
    today = queue_decision(limits, req, None, queue_rule=False)
    assert [ruled(j, DEEP) for j in range(3)] == [3600.0, 600.0, 3600.0]
    assert [ruled(j, SHORT) for j in range(3)] == [3000.0, 600.0, 3600.0]
    assert [today(j, DEEP) for j in range(3)] == [3000.0, 600.0, 3600.0]
    # the kernel's own limits (whole minutes) fed to the callback: the same keep-or-give-back
    for need in (3000.0, 600.0):
        alone = allocation(TIME, soft_input(need, None)).amount
        assert alone is not None
        kernel = allocation(TIME, soft_input(need, DEEP)).amount
        got = queue_decision(np.array([alone]), np.array([3600.0]), None, queue_rule=True)(0, DEEP)
        assert got == (3600.0 if kernel is None else kernel)
    # a partition limit below the request: the kernel and the callback weigh the cut against the same 3000 s
    inp = KernelInput(3600.0, math.log(1500.0 / 3600.0), 10, 3000.0, GUARD, soft=True)
    alone = allocation(TIME, inp).amount
    assert alone is not None and alone > KEEP_SHARE * 3000.0
    kernel = allocation(TIME, KernelInput(3600.0, inp.log_bound, 10, 3000.0, GUARD, soft=True, queue=DEEP)).amount
    got = queue_decision(np.array([alone]), np.array([3600.0]), np.array([3000.0]), queue_rule=True)(0, DEEP)
    assert got == kernel == 3000.0
