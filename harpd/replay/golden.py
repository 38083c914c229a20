"""The golden check: a trace through ``ModelPredictor.decide`` and through the replay gives the same allocations.

Both sides decide every job with the one kernel (``harpd.predict.decide``);
this walks a trace twice with one fixed champion and reports where they part:

* the replay: ``prepare`` (features at submission from the finished jobs)
  then ``engine.champion_walk``;
* harpd: a ``ModelPredictor`` holding that champion, fed each job's outcome
  (``learn``) as it finishes, asked ``decide(job, now=submit)`` in
  submission order, with the replay's clock.

The test (tests/unit/predict/test_golden_kernel.py) runs it on a small
synthetic trace; ``bench/golden_kernel.py`` on slices of the shared traces.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from harp_submit.units import parse_mem, parse_time
from harpd.features.usage import usage_of
from harpd.models.envelope import ModelEnvelope
from harpd.predict.live import ModelPredictor
from harpd.protocol import JobRequest, Resources
from harpd.records import JobRecord
from harpd.replay.dataset import Prepared, fit_rows, prepare
from harpd.replay.engine import ReplayConfig, champion_walk

if TYPE_CHECKING:
    from harpd.config import HarpSettings

__all__ = ["GoldenResult", "champion_of", "golden", "golden_time", "request_of"]


@dataclass
class GoldenResult:
    """Job-by-job comparison of the two sides (seconds; None: the request stands)."""

    jobs: int
    changed: int  # jobs the replay changed
    mismatches: list[tuple[int, float | None, float | None]] = field(default_factory=list)  # (job, replay, harpd)


def request_of(r: JobRecord) -> JobRequest:
    """The submission a finished record was, as harp-submit would send it.

    Its cores go as tasks of one CPU each: the history groups them alike, and
    the cores rule (which the replay has no twin of) leaves a one-CPU task alone.
    """
    time_s = int(math.ceil(r.req_time_s)) if r.req_time_s else None
    cpus = int(r.req_cpus or r.alloc_cpus or 1)
    gpus = r.req_gpus if r.req_gpus is not None else r.alloc_gpus
    return JobRequest(
        partition=r.partition,
        account=r.account,
        signature=r.signature,
        job_name=r.job_name,
        array_size=r.array_size,
        input_bytes=r.input_bytes,
        request=Resources(
            time_s=time_s,
            cpus_per_task=1,
            ntasks=cpus,
            mem_mb=None if r.req_mem_mb is None else int(r.req_mem_mb),
            gpus=str(gpus) if gpus else None,
        ),
    )


def champion_of(prep: Prepared, cfg: ReplayConfig, upto: int) -> Any:
    """harp's model fitted on the jobs finished before job ``upto`` (a champion as training would make one)."""
    idx = prep.finish_seq[: int(prep.known_at[upto])]
    return fit_rows(cfg.make_model("harp", prep), prep, idx)


def golden_time(
    records: Sequence[JobRecord], settings: HarpSettings, cfg: ReplayConfig, train_share: float = 0.5
) -> GoldenResult:
    """``golden`` for time (the walk the golden test and the bench began with)."""
    return golden(records, settings, cfg, "time", train_share)


def _asked(r: JobRecord, resource: str) -> bool:
    return bool(r.req_time_s if resource == "time" else r.req_mem_mb)


def _changed(d: Any, resource: str) -> float | None:
    """The allocation harpd's decision gives ``resource`` (seconds or MiB; None: the request stands)."""
    option, parse = ("time", parse_time) if resource == "time" else ("mem", parse_mem)
    got = next((parse(c.value) for c in d.changes if c.option == option), None)
    return None if got is None else float(got)


def golden(
    records: Sequence[JobRecord], settings: HarpSettings, cfg: ReplayConfig, resource: str, train_share: float = 0.5
) -> GoldenResult:
    """Walk ``records`` through both sides with one ``resource`` champion; compare every job after it."""
    jobs = sorted(
        (
            r
            for r in records
            if _asked(r, resource) and r.submit_time is not None and r.end_time is not None and usage_of(r, resource)
        ),
        key=lambda r: (r.submit_time, r.job_id),
    )
    prep = prepare(jobs, resource)
    if prep.n != len(jobs):
        raise ValueError(f"the trace has {len(jobs) - prep.n} jobs the replay drops: give it finished jobs only")
    start = int(prep.n * train_share)
    model = champion_of(prep, cfg, start)
    replay = champion_walk(prep, cfg, model)
    harpd = ModelPredictor(
        settings,
        models={resource: ModelEnvelope(model=model, name="harp", resource=resource, relative=True)},
        soft_limits=cfg.limits == "soft",
    )
    # an outcome is known at its end, never before its job's submission (a trace's clocks may disagree)
    ends = (
        prep.end if prep.end is not None else [max(float(r.end_time or 0.0), float(r.submit_time or 0.0)) for r in jobs]
    )
    by_end = sorted(range(prep.n), key=lambda j: (float(ends[j]), j))
    learnt = 0
    out = GoldenResult(jobs=prep.n - start, changed=0)
    for i in range(prep.n):
        t = float(prep.submit[i])
        fresh = []
        while learnt < len(by_end) and float(ends[by_end[learnt]]) <= t:
            fresh.append(jobs[by_end[learnt]])
            learnt += 1
        harpd.learn(fresh)
        # a trace without users (Cedar's) groups by account, as the history does for an empty user
        d = harpd.decide(request_of(jobs[i]), jobs[i].user or "", 0, now=t)
        if i < start:
            continue
        got = _changed(d, resource)
        want = None if math.isnan(replay[i]) else float(replay[i])
        out.changed += want is not None
        if got != want:
            out.mismatches.append((i, want, got))
    return out
