"""The queue rule: the share of harp's soft cut a job gives back as the waiting work deepens."""

from __future__ import annotations

import pytest

from harpd.predict.queue_policy import queue_cut
from harpd.predict.queue_view import QueueView


def view(backlog_core_s: float, cores: int = 100) -> QueueView:
    return QueueView(pending_jobs=3, backlog_core_s=backlog_core_s, running_jobs=5, now=0.0, total_cores=cores)


def test_no_queue_keeps_the_cut():
    c = queue_cut(view(0.0), request_s=3600.0, limit_s=600.0)
    assert (c.limit_s, c.given_back) == (600.0, 0.0)


def test_a_queue_longer_than_the_request_gives_the_whole_cut_back():
    # 100 cores x 7200 s waiting: the machine is busy for 7200 s, more than the 3600 s request
    c = queue_cut(view(100 * 7200.0), request_s=3600.0, limit_s=600.0)
    assert (c.limit_s, c.given_back) == (3600.0, 1.0)
    assert "given back" in c.reason


def test_in_between_the_share_is_the_drain_over_the_request():
    # 100 cores x 900 s waiting against a 3600 s request: a quarter of the 3000 s cut back
    c = queue_cut(view(100 * 900.0), request_s=3600.0, limit_s=600.0)
    assert c.given_back == pytest.approx(0.25)
    assert c.limit_s == pytest.approx(600.0 + 0.25 * 3000.0)


def test_deeper_queues_never_cut_deeper_and_stay_within_limit_and_request():
    limits = [queue_cut(view(b), 3600.0, 600.0).limit_s for b in (0, 1e3, 1e4, 1e5, 1e6, 1e8)]
    assert limits == sorted(limits)
    assert all(600.0 <= v <= 3600.0 for v in limits)


@pytest.mark.parametrize(
    ("v", "request_s", "limit"),
    [
        (view(1e9, cores=0), 3600.0, 600.0),  # the cluster's size unknown: no depth to read
        (view(1e9), 3600.0, 3600.0),  # no cut
        (view(1e9), 3600.0, 5000.0),  # a limit above the request (harp raised it): nothing to give back
        (view(1e9), float("nan"), 600.0),  # no request
        (view(1e9), 0.0, 600.0),
    ],
)
def test_nothing_to_weigh_leaves_the_limit(v, request_s, limit):
    c = queue_cut(v, request_s, limit)
    assert (c.limit_s, c.given_back) == (limit, 0.0)


def test_the_view_says_how_long_the_machine_needs_for_the_waiting_work():
    assert view(1000.0, cores=10).drain_s == 100.0
    assert view(1000.0, cores=0).drain_s is None
