"""Cores replayed: core-hours reserved and used, users' requests against harp's cores rule.

A chronological walk over finished jobs (sacct with TotalCPU, Nextflow
traces): each job gets the cores ``harpd.predict.cores`` would give from
the runs of its signature that had finished by then, at its submission and
again while it waits, as harpd's resizer re-decides pending jobs; the
job's elapsed time is taken as it ran (harp's cores are at least what the
job used, except for the slowed ones, which the figures count).

Figures, for jobs that asked for more than one core (the only ones harp can
shrink) and for all: core-hours reserved (cores x elapsed) by the users and
by harp, core-hours used (CPU time), and the share of jobs harp would have
slowed beyond ``predict.cores_tolerance`` (they used more than 1 +
tolerance times the cores harp gave them: within it, harpd's time limit
includes the slowdown, ``harpd.predict.live``); beside them the
clairvoyant reference (each job its own cores used, in whole cores), the
least any rule that slows no job can reserve.  A job counts as slowed only
when harp's allocation slowed it beyond what its own request did (it used
more cores than harp gave and harp gave fewer than that within its request):
a trace where harp changes nothing shows none slowed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from harpd.features.workflow import is_workflow_signature
from harpd.predict.cores import SLACK, cores_used, resized_while_pending, whole_cores
from harpd.records import JobRecord

#: when a job's cores are decided: at its start (re-sized while pending, as harpd does) or at its submission
DECIDE_AT = ("start", "submit")


@dataclass
class CoreFigures:
    """Core-hours of one set of jobs."""

    jobs: int = 0
    users_core_h: float = 0.0
    harp_core_h: float = 0.0
    used_core_h: float = 0.0
    best_core_h: float = 0.0  # clairvoyant: each job its own used cores, whole, never above its request
    changed: int = 0
    #: per slowed job, how much longer harp's cores made it (its cores used over those given, less one)
    slowdowns: list[float] = field(default_factory=list)
    #: slowed within this share (``predict.cores_tolerance``) is not counted as slowed: the time limit holds it
    tolerance: float = 0.0

    def add(self, req: int, given: int, used: float, elapsed_s: float) -> None:
        self.jobs += 1
        self.users_core_h += req * elapsed_s / 3600.0
        self.harp_core_h += given * elapsed_s / 3600.0
        self.used_core_h += used * elapsed_s / 3600.0
        self.best_core_h += min(req, whole_cores(used)) * elapsed_s / 3600.0
        self.changed += given < req
        # slowed by harp: it used more cores than harp gave, and more than that is within its own request
        # (a job that outgrew its request was slowed by the user's request, not by harp's cut)
        if min(used, req) - SLACK > given:
            self.slowdowns.append(min(used, req) / given - 1.0)

    @property
    def share(self) -> float:
        """harp's core-hours reserved over the users'."""
        return self.harp_core_h / self.users_core_h if self.users_core_h else 1.0

    @property
    def slowed(self) -> int:
        """Jobs harp slowed beyond the tolerance: they used more than 1 + tolerance times the cores it gave."""
        return self.slowed_over(self.tolerance)

    @property
    def slowed_at_all(self) -> int:
        """Jobs harp slowed by any amount (within the tolerance included)."""
        return len(self.slowdowns)

    def slowed_over(self, tolerance: float) -> int:
        """Jobs harp slowed by more than ``tolerance`` of their runtime."""
        return sum(s > tolerance for s in self.slowdowns)

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


def _workflow_task(rec: JobRecord) -> bool:
    """A workflow manager's task: harpd re-decides its CPUs while it is pending even if it kept them.

    As harp-submit registers them (``features.workflow``), or a Nextflow
    trace's task (its state ``nextflow:...``).
    """
    return is_workflow_signature(rec.signature) or (rec.state or "").startswith("nextflow:")


def replay_cores(records: Iterable[JobRecord], alpha: float, settings=None, at: str = "start") -> CoresReplay:
    """Walk ``records`` in time order; a run joins its signature's history once it has ended.

    The cores given are harpd's own decision (one decision path): a
    history-only live predictor is handed each run that has ended (``learn``,
    as the ingest poller does) and asked ``decide`` for each job at its
    submission, with ``predict.alpha_cpus`` = ``alpha``: the same rule, the
    same rails (``allow_shrink``, a resource restored after a failed cut).

    With ``at="start"`` (the default: what harpd does) a pending job is then
    re-decided as ``harpd.watch.resize`` re-decides it: on each outcome of
    its signature while it waits, if harp lowered its CPUs or it is a
    workflow task (``managed.cpus_to_resize``), and changed once, at the
    first outcome whose answer differs (one ``resize-cpus`` change per job
    and time limit); ``at="submit"`` keeps the answer at submission.
    """
    from harpd.config import HarpSettings
    from harpd.predict.live import ModelPredictor
    from harpd.protocol import JobRequest, Resources

    if at not in DECIDE_AT:
        raise ValueError(f"unknown decision time {at!r}; use one of {', '.join(DECIDE_AT)}")
    base = settings if settings is not None else HarpSettings()
    settings = base.model_copy(update={"predict": base.predict.model_copy(update={"alpha_cpus": alpha})})
    # time too: a cut that may slow a job within the tolerance needs room in its time limit (harpd.predict.live)
    harpd = ModelPredictor.history_only(settings, resources=("time", "mem"))
    jobs = sorted((r for r in records if _usable(r)), key=lambda r: (r.submit_time, r.job_id))

    def given_at(rec: JobRecord, when: float) -> int:
        req = int(rec.req_cpus or 1)
        time_s = int(min(rec.req_time_s, 3650 * 86400)) if rec.req_time_s and rec.req_time_s >= 1 else None
        job = JobRequest(
            signature=rec.signature,
            job_name=rec.job_name,
            request=Resources(cpus_per_task=req, ntasks=1, time_s=time_s),
        )
        d = harpd.decide(job, rec.user or "replay", 0, now=when)
        return next((int(c.value) for c in d.changes if c.option == "cpus-per-task"), req)

    END, SUBMIT, START = 0, 1, 2  # at one instant: what ended is learnt before anything is decided
    events: list[tuple[float, int, int]] = []
    for i, rec in enumerate(jobs):
        events += [(float(rec.end_time), END, i), (float(rec.submit_time), SUBMIT, i)]  # type: ignore[arg-type]
        if rec.start_time is not None:
            events.append((float(rec.start_time), START, i))
    events.sort()
    given: dict[int, int] = {}
    pending: dict[str | None, set[int]] = {}  # per signature, its jobs the resizer may still change
    for when, kind, i in events:
        rec = jobs[i]
        if kind == END:
            harpd.learn([rec])
            waiting = pending.get(rec.signature, set())
            waiting.discard(i)  # an ended job waits no more (a trace's start may be missing)
            for j in sorted(waiting):
                fresh = given_at(jobs[j], when)
                if fresh != given[j]:
                    given[j] = fresh
                    waiting.discard(j)  # re-sized once at this time limit: never again
        elif kind == SUBMIT:
            req = int(rec.req_cpus or 1)
            given[i] = given_at(rec, when)
            starts_later = rec.start_time is not None and rec.start_time > when
            if at == "start" and starts_later and resized_while_pending(req, 1, given[i] < req, _workflow_task(rec)):
                pending.setdefault(rec.signature, set()).add(i)
        else:
            pending.get(rec.signature, set()).discard(i)
    tolerance = float(settings.predict.cores_tolerance)
    out = CoresReplay(CoreFigures(tolerance=tolerance), CoreFigures(tolerance=tolerance))
    for i, rec in enumerate(jobs):
        req = int(rec.req_cpus or 1)
        used = cores_used(rec.used_cpu_s, rec.used_time_s) or 0.0
        elapsed = float(rec.used_time_s or 0.0)
        out.all.add(req, given[i], used, elapsed)
        if req > 1:
            out.multi.add(req, given[i], used, elapsed)
    return out
