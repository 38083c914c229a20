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
from harpd.replay.golden import golden, golden_time


def _trace(n: int = 700, seed: int = 3) -> list[JobRecord]:
    rnd = random.Random(seed)
    kinds = [  # (user, request s, runtime draw, memory request MiB, peak draw)
        ("u1", 7200, lambda: rnd.uniform(600, 900), 8000, lambda: rnd.uniform(900, 1100)),
        ("u2", 3600, lambda: rnd.uniform(100, 3000), 4000, lambda: rnd.uniform(200, 3500)),
        ("u3", 14400, lambda: rnd.choice([30.0, rnd.uniform(5000, 6000)]), 32000, lambda: rnd.choice([50.0, 20000.0])),
        ("u4", 1800, lambda: 1800.0, 2000, lambda: 2000.0),  # runs to its limits: ran out
        ("u5", 86400, lambda: rnd.uniform(3000, 3400), 64000, lambda: rnd.uniform(3000, 3300)),
    ]
    out, t = [], 0.0
    for i in range(n):
        t += rnd.uniform(20, 400)
        user, req, draw, req_mem, peak_draw = kinds[rnd.randrange(len(kinds))]
        run = min(float(draw()), float(req))
        peak = min(float(peak_draw()), float(req_mem))
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
                req_mem_mb=float(req_mem),
                used_mem_mb=peak,
                outcome=Outcome.TIMEOUT if run >= req else Outcome.COMPLETED,
                censored_time=run >= req,
                censored_mem=peak >= req_mem,
            )
        )
    return out


def _setup(limits: str, gain: float, resource: str = "time") -> tuple[HarpSettings, ReplayConfig]:
    base = HarpSettings()
    settings = base.model_copy(update={"predict": base.predict.model_copy(update={"hard_cut_gain": gain})})
    pr = settings.predict
    cfg = ReplayConfig(
        alpha=pr.alpha_time if resource == "time" else pr.alpha_mem,
        guard=Guard.from_settings(pr, resource, settings.recovery.max_attempts),
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


def test_memory_harpd_and_the_replay_allocate_alike():
    settings, cfg = _setup("hard", 0.0, "mem")
    res = golden(_trace(), settings, cfg, "mem")
    assert res.jobs > 300
    assert res.mismatches == []
    assert res.changed > 50  # memory has no kill-cost gate: cuts happen
