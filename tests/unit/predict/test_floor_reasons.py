"""A decided size names the rule that set it (#45 E): the soft policy's least limit is not predict.floor_time_s."""

from __future__ import annotations

import numpy as np

from harpd.config import HarpSettings
from harpd.models.envelope import ModelEnvelope
from harpd.predict.live import ModelPredictor
from harpd.protocol import JobRequest
from harpd.records import JobRecord, Outcome


class _Tiny:
    """A stand-in model: every job needs a hundredth of its request."""

    theta = None

    def predict(self, X, groups=None):
        return np.full(len(X), np.log(0.01))


def test_a_soft_limit_raised_to_the_watchers_least_limit_names_the_soft_policy_not_floor_time_s():
    env = ModelEnvelope(model=_Tiny(), name="tiny", relative=True, resource="time")
    p = ModelPredictor(HarpSettings(predict={"floor_time_s": 60}), models={"time": env}, soft_limits=True)
    p._add(
        [
            JobRecord(
                job_id=str(i),
                source="t",
                user="ann",
                account="a",
                partition="cpu",
                signature="sig",
                submit_time=1000.0 * i,
                start_time=1000.0 * i,
                end_time=1000.0 * i + 5,
                used_time_s=5.0,
                req_time_s=7200.0,
                req_cpus=1,
                outcome=Outcome.COMPLETED,
            )
            for i in range(8)
        ]
    )
    d = p.decide(JobRequest(partition="cpu", signature="sig", request={"time_s": 7200}), "ann", 1000)
    (c,) = [c for c in d.changes if c.option == "time"]
    assert c.value == "00:03:00", c.reason
    assert "predict.floor_time_s" not in c.reason and "the soft policy's least limit" in c.reason, c.reason
