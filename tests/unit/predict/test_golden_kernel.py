"""The golden test: one trace through ``ModelPredictor.decide`` and through the replay, the same allocations.

Both decide each job with the one kernel (``harpd.predict.decide``); the
trace is synthetic (programs with steady, spread and bimodal runtimes, one
that runs out) so that cuts, kept requests, rails and rounding all occur.
"""

from __future__ import annotations

import random

import pytest

from harpd.config import HarpSettings
from harpd.predict.allocation import Guard
from harpd.predict.soft import SoftPolicy
from harpd.records import JobRecord, Outcome
from harpd.replay.engine import ReplayConfig
from harpd.replay.golden import golden_time


def _trace(n: int = 700, seed: int = 3) -> list[JobRecord]:
    rnd = random.Random(seed)
    kinds = [  # (user, request s, runtime draw)
        ("u1", 7200, lambda: rnd.uniform(600, 900)),
        ("u2", 3600, lambda: rnd.uniform(100, 3000)),
        ("u3", 14400, lambda: rnd.choice([30.0, rnd.uniform(5000, 6000)])),
        ("u4", 1800, lambda: 1800.0),  # runs to its limit: ran out
        ("u5", 86400, lambda: rnd.uniform(3000, 3400)),
    ]
    out, t = [], 0.0
    for i in range(n):
        t += rnd.uniform(20, 400)
        user, req, draw = kinds[rnd.randrange(len(kinds))]
        run = min(float(draw()), float(req))
        out.append(
            JobRecord(
                job_id=str(i),
                source="t",
                user=user,
                partition="p",
                submit_time=t,
                start_time=t,
                end_time=t + run,
                used_time_s=run,
                req_time_s=float(req),
                req_cpus=1,
                outcome=Outcome.TIMEOUT if run >= req else Outcome.COMPLETED,
                censored_time=run >= req,
            )
        )
    return out


def _setup(limits: str, gain: float) -> tuple[HarpSettings, ReplayConfig]:
    base = HarpSettings()
    settings = base.model_copy(update={"predict": base.predict.model_copy(update={"hard_cut_gain": gain})})
    pr = settings.predict
    cfg = ReplayConfig(
        alpha=pr.alpha_time,
        guard=Guard.from_settings(pr, "time", settings.recovery.max_attempts),
        max_attempts=settings.recovery.max_attempts,
        gbm={"max_iter": 40},
        limits=limits,
        soft=SoftPolicy.from_settings(pr, settings.watch),
        hard_cut_gain=gain,
    )
    return settings, cfg


@pytest.mark.parametrize("gain", [1.0, 0.0])
def test_hard_limits_harpd_and_the_replay_allocate_alike(gain):
    settings, cfg = _setup("hard", gain)
    res = golden_time(_trace(), settings, cfg)
    assert res.jobs > 300
    assert res.mismatches == []
    if gain > 0:
        assert res.changed > 50  # the comparison covers cuts, not only kept requests
    else:
        assert res.changed == 0  # no gain: no hard cut is worth a kill, on either side


def test_soft_limits_harpd_and_the_replay_allocate_alike():
    settings, cfg = _setup("soft", 0.0)
    res = golden_time(_trace(), settings, cfg)
    assert res.mismatches == []
    assert res.changed > 50
