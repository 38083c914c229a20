"""harp's time cut keeps --time-min and --signal meaningful (harpd side and harp-submit's own check)."""

from __future__ import annotations

import pytest

from harp_submit.decision import BadDecision, check_time_options, parse_changes
from harpd.predict.time_options import SUBMITIT_KEPT, fit_time, kept_under_soft_limits
from harpd.protocol import Resources


def test_signal_lead_comes_on_top_of_the_predicted_need() -> None:
    value, why = fit_time(300.0, Resources(time_s=1800, signal_s=600), 60)
    assert value == 900.0 and "--signal" in why


def test_signal_lead_never_leaves_less_than_the_floor() -> None:
    assert fit_time(0.0, Resources(time_s=1800, signal_s=120), 60)[0] == 180.0


def test_time_min_is_a_floor() -> None:
    value, why = fit_time(240.0, Resources(time_s=1800, time_min_s=600), 60)
    assert value == 600.0 and "--time-min" in why
    assert fit_time(900.0, Resources(time_s=1800, time_min_s=600), 60) == (900.0, None)


def test_plain_request_unchanged() -> None:
    assert fit_time(240.0, Resources(time_s=1800), 60) == (240.0, None)


def test_soft_limits_keep_signal_and_deadline_jobs() -> None:
    assert "--signal" in kept_under_soft_limits(Resources(signal_s=60))
    assert "--deadline" in kept_under_soft_limits(Resources(deadline=True))
    assert kept_under_soft_limits(Resources(time_min_s=60)) is None


def _time(value: str):
    return parse_changes({"changes": [{"option": "time", "value": value}]})


@pytest.mark.parametrize(
    "value, resources, words",
    [
        ("00:04:00", {"time_min_s": 300}, "--time-min"),
        ("00:02:00", {"signal_s": 120}, "--signal"),
    ],
)
def test_client_refuses_a_limit_that_breaks_them(value, resources, words) -> None:
    with pytest.raises(BadDecision, match=words):
        check_time_options(_time(value), resources)


def test_client_accepts_a_limit_that_keeps_them() -> None:
    check_time_options(_time("00:05:00"), {"time_min_s": 300, "signal_s": 120})


SUBMITIT = ["srun --unbuffered --output /l/%j_%t_log.out python -u -m submitit.core._submit /l"]


@pytest.mark.parametrize("minutes", [5, 11, 20, 60, 600])
def test_a_submitit_job_asking_for_a_signal_keeps_its_time(minutes) -> None:
    """#51: a 7-minute cut of a 20-minute submitit job came at 5.5 min, which submitit took for a preemption;
    a signal after submitit's threshold fails a function that cannot checkpoint, which harp cannot rerun."""
    t = minutes * 60
    value, why = fit_time(300.0, Resources(time_s=t, signal_s=90), 60, SUBMITIT)
    assert value >= t  # kept (at 5 minutes the need plus the warning already reaches the request)
    if 300 + 90 < t:
        assert value == t and why is not None and why.endswith(SUBMITIT_KEPT)
        assert why == SUBMITIT_KEPT  # alone: the live decision names it as the reason the time is kept


def test_other_signal_jobs_keep_the_plain_rule() -> None:
    assert fit_time(300.0, Resources(time_s=1800, signal_s=600), 60, ["python train.py"])[0] == 900.0
    assert fit_time(200.0, Resources(time_s=600, signal_s=90), 60, ["python -m mymod.submitit_like"]) == (
        290.0,
        "+90s for --signal's warning",
    )
    # a submitit job without a signal, or without a time asked: nothing to keep
    assert fit_time(300.0, Resources(time_s=1200), 60, SUBMITIT) == (300.0, None)
    assert fit_time(300.0, Resources(signal_s=90), 60, SUBMITIT)[0] == 390.0
