"""Cores replayed: core-hours reserved and used, users' requests against harp's cores rule.

A chronological walk over finished jobs (sacct with TotalCPU, Nextflow
traces): each job, at its submission, gets the cores ``harpd.predict.cores``
would give from the runs of its signature that had finished by then; the
job's elapsed time is taken as it ran (harp's cores are at least what the
job used, except for the slowed ones, which the figures count).

Figures, for jobs that asked for more than one core (the only ones harp can
shrink) and for all: core-hours reserved (cores x elapsed) by the users and
by harp, core-hours used (CPU time), and the share of jobs harp would have
slowed (they used more cores than harp gave them); beside them the
clairvoyant reference (each job its own cores used, in whole cores), the
least any rule that slows no job can reserve.  A job counts as slowed only
when harp's allocation slowed it beyond what its own request did (it used
more cores than harp gave and harp gave fewer than that within its request):
a trace where harp changes nothing shows none slowed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from harpd.predict.cores import SLACK, cores_used, whole_cores
from harpd.records import JobRecord


@dataclass
class CoreFigures:
    """Core-hours of one set of jobs."""

    jobs: int = 0
    users_core_h: float = 0.0
    harp_core_h: float = 0.0
    used_core_h: float = 0.0
    best_core_h: float = 0.0  # clairvoyant: each job its own used cores, whole, never above its request
    changed: int = 0
    slowed: int = 0

    def add(self, req: int, given: int, used: float, elapsed_s: float) -> None:
        self.jobs += 1
        self.users_core_h += req * elapsed_s / 3600.0
        self.harp_core_h += given * elapsed_s / 3600.0
        self.used_core_h += used * elapsed_s / 3600.0
        self.best_core_h += min(req, whole_cores(used)) * elapsed_s / 3600.0
        self.changed += given < req
        # slowed by harp: it used more cores than harp gave, and more than that is within its own request
        # (a job that outgrew its request was slowed by the user's request, not by harp's cut)
        self.slowed += min(used, req) - SLACK > given

    @property
    def share(self) -> float:
        """harp's core-hours reserved over the users'."""
        return self.harp_core_h / self.users_core_h if self.users_core_h else 1.0

    @property
    def slowed_share(self) -> float:
        return self.slowed / self.jobs if self.jobs else 0.0


@dataclass
class CoresReplay:
    multi: CoreFigures = field(default_factory=CoreFigures)  # jobs that asked for more than one core
    all: CoreFigures = field(default_factory=CoreFigures)


def _usable(rec: JobRecord) -> bool:
    return (
        rec.submit_time is not None
        and rec.end_time is not None
        and bool(rec.req_cpus)
        and cores_used(rec.used_cpu_s, rec.used_time_s) is not None
    )


def replay_cores(records: Iterable[JobRecord], alpha: float, settings=None) -> CoresReplay:
    """Walk ``records`` in submission order; a run joins its signature's history once it has ended.

    The cores given are harpd's own decision (one decision path): a
    history-only live predictor is handed each run that has ended (``learn``,
    as the ingest poller does) and asked ``decide`` for each job at its
    submission, with ``predict.alpha_cpus`` = ``alpha``: the same rule, the
    same rails (``allow_shrink``, a resource restored after a failed cut).
    """
    from harpd.config import HarpSettings
    from harpd.predict.live import ModelPredictor
    from harpd.protocol import JobRequest, Resources

    base = settings if settings is not None else HarpSettings()
    settings = base.model_copy(update={"predict": base.predict.model_copy(update={"alpha_cpus": alpha})})
    harpd = ModelPredictor.history_only(settings, resources=("mem",))  # a job with no memory asked: cores only
    jobs = sorted((r for r in records if _usable(r)), key=lambda r: (r.submit_time, r.job_id))
    ends = sorted(range(len(jobs)), key=lambda i: jobs[i].end_time)  # type: ignore[arg-type,return-value]
    out = CoresReplay()
    e = 0
    for rec in jobs:
        done = []
        while e < len(ends) and jobs[ends[e]].end_time <= rec.submit_time:  # type: ignore[operator]
            done.append(jobs[ends[e]])
            e += 1
        harpd.learn(done)
        req = int(rec.req_cpus or 1)
        used = cores_used(rec.used_cpu_s, rec.used_time_s) or 0.0
        elapsed = float(rec.used_time_s or 0.0)
        job = JobRequest(signature=rec.signature, job_name=rec.job_name, request=Resources(cpus_per_task=req, ntasks=1))
        d = harpd.decide(job, rec.user or "replay", 0, now=rec.submit_time)
        given = next((int(c.value) for c in d.changes if c.option == "cpus-per-task"), req)
        out.all.add(req, given, used, elapsed)
        if req > 1:
            out.multi.add(req, given, used, elapsed)
    return out
