"""A new workflow task type's first allocation from the shares of earlier types (harpd.predict.workflow_prior)."""

from __future__ import annotations

import math

import pytest

from harpd.evaluate.sizey_metric import GBH
from harpd.evaluate.workflow_replay import Task, WorkflowReplayError, run_chronological
from harpd.predict.workflow_harp import HarpTaskModel
from harpd.predict.workflow_prior import TypePrior

GB = 1e9


def test_no_share_until_enough_types_then_the_conformal_order_statistic():
    prior = TypePrior(alpha=0.1)
    for k in range(8):
        prior.learn(f"T{k}", 0.1 * (k + 1) * GB, 10 * GB)  # shares 0.01 .. 0.08
    assert prior.share is None and prior.first(10 * GB) is None  # 8 types: rank 9 of 8 does not exist
    prior.learn("T8", 0.5 * GB, 10 * GB)
    assert prior.share == pytest.approx(0.08)  # 9 types: the 9th smallest of 9, the largest
    assert prior.first(20 * GB) == pytest.approx(1.6 * GB)
    prior.learn("T0", 2 * GB, 10 * GB)  # a type's share is the most it used: it moves to 0.2
    assert prior.share == pytest.approx(0.2)


def test_a_type_counts_once_and_runs_without_a_request_say_nothing():
    prior = TypePrior(alpha=0.4)
    for _ in range(5):
        prior.learn("same", 1 * GB, 4 * GB)
    prior.learn("no-request", 1 * GB, math.nan)
    assert prior.shares == {"same": 0.25} and prior.share is None  # one type: rank 2 of 1
    prior.learn("other", 3 * GB, 4 * GB)
    assert prior.share == pytest.approx(0.75)
    assert prior.first(math.nan) is None and prior.first(0.0) is None


def test_a_share_at_or_over_the_whole_request_keeps_the_request():
    prior = TypePrior(alpha=0.5)
    prior.learn("a", 5 * GB, 4 * GB)
    prior.learn("b", 5 * GB, 4 * GB)
    assert prior.share >= 1.0 and prior.first(4 * GB) is None


@pytest.mark.parametrize("alpha", [0.0, 1.0, -0.1])
def test_alpha_outside_the_open_unit_interval_is_refused(alpha):
    with pytest.raises(ValueError, match="alpha"):
        TypePrior(alpha)


def test_a_types_runs_feed_the_shared_prior_and_size_a_new_type():
    prior = TypePrior(alpha=0.4)
    a, b, new = HarpTaskModel(prior, "a"), HarpTaskModel(prior, "b"), HarpTaskModel(prior, "new")
    a.learn(1.0, 2 * GB, 10.0, 8 * GB)
    assert new.first(1.0, 8 * GB) is None  # one type seen: no share at alpha 0.4
    b.learn(1.0, 4 * GB, 10.0, 8 * GB)
    assert new.first(1.0, 16 * GB) == pytest.approx(8 * GB)  # the larger share, 0.5, of its own request
    assert HarpTaskModel().first(1.0, 8 * GB) is None  # without a prior: the request stands


def test_first_allocation_is_never_above_the_request():
    m = HarpTaskModel()
    m.learn(1.0, 6 * GB, 10.0, 8 * GB)
    assert m.first(1.0, 8 * GB) == pytest.approx(8 * GB)  # twice 6 GB is more than was asked
    assert m.first(1.0, math.nan) == pytest.approx(12 * GB)  # no request: twice the most seen


def _t(proc: str, usage: float, submit: float, start: float, end: float) -> Task:
    """A task that used ``usage`` GB of the 8 GB it asked for (harpd sizes in MiB, above a 100 MB floor)."""
    return Task(proc, 1.0, usage * GB, usage * GB, end - start, 8.0 * GB, submit, end, start)


def test_deciding_at_start_learns_siblings_that_ended_while_it_was_pending():
    first = _t("P", 2.0, submit=0.0, start=0.0, end=100.0)
    pending = _t("P", 2.0, submit=1.0, start=150.0, end=250.0)  # waited in the queue past the first's end
    at_submit = run_chronological([first, pending], "submit")
    at_start = run_chronological([first, pending], "start")
    for rows in (at_submit.rows, at_start.rows):
        assert rows["witt-percentile"].tasks == rows["harp"].tasks == 2
    # at submission neither knows anything: both at the request, for every predictor
    assert at_submit.rows["witt-percentile"].wastage_gbh == pytest.approx(at_submit.rows["request"].wastage_gbh)
    assert at_start.rows["witt-percentile"].wastage_gbh < at_submit.rows["witt-percentile"].wastage_gbh
    assert at_start.rows["harp"].wastage_gbh < at_submit.rows["harp"].wastage_gbh
    assert at_start.decided_at == "start" and at_submit.decided_at == "submit"


def test_unknown_decision_time_is_one_error():
    with pytest.raises(WorkflowReplayError, match="decision time"):
        run_chronological([_t("P", 2.0, 0.0, 0.0, 1.0)], "later")


def test_the_share_as_it_stood_at_an_earlier_time():
    prior = TypePrior(alpha=0.4)
    prior.learn("a", 1 * GB, 4 * GB, at=100.0)
    prior.learn("b", 2 * GB, 4 * GB, at=200.0)
    assert prior.share_as_of(50.0) is None and prior.share_as_of(150.0) is None  # one type: too few
    assert prior.share_as_of(200.0) == pytest.approx(0.5) == prior.share
    assert prior.first(8 * GB, as_of=150.0) is None and prior.first(8 * GB, as_of=250.0) == pytest.approx(4 * GB)


def test_a_task_nothing_of_its_type_ended_for_keeps_the_prior_of_its_submission():
    # nine types end by 110 (enough at alpha 0.1), each having used 2 of its 8; a new type's task is
    # submitted at 50 and starts at 200, another's is submitted at 150
    done = [_t(f"T{k}", 2.0, 0.0, 0.0, 100.0 + k) for k in range(9)]
    late = _t("C", 1.0, submit=50.0, start=200.0, end=300.0)
    after = _t("D", 1.0, submit=150.0, start=150.0, end=250.0)
    res = run_chronological([*done, late, after], "start")
    # C: nothing of its type ever ends before it starts, so the resizer never re-decides it: it runs at
    # the request harp kept at its submission (8 for a usage of 1); D gets 0.25 of its 8, 2
    over = res.rows["harp"].over_gbh * GBH
    assert over == pytest.approx((sum(6.0 * t.runtime_s for t in done) + 7.0 * 100.0 + 1.0 * 100.0) * GB, rel=1e-3)
