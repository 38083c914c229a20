"""Trace records for the replay tests: one job with round numbers per call."""

from __future__ import annotations

from harpd.cli.replay_report import ReplayReport
from harpd.records import JobRecord, Outcome
from harpd.replay.metric import ModelMetrics


def rec(
    i: int, submit: float, run_s: float, req: float, user: str = "u1", cens: bool = False, cpus: int = 2
) -> JobRecord:
    """Job ``i`` submitted at ``submit`` that ran ``run_s`` of ``req`` seconds (killed at it if ``cens``)."""
    return JobRecord(
        job_id=str(i),
        source="t",
        user=user,
        partition="p",
        submit_time=float(submit),
        start_time=float(submit),
        end_time=float(submit + run_s),
        used_time_s=float(run_s),
        req_time_s=float(req),
        req_cpus=cpus,
        outcome=Outcome.TIMEOUT if cens else Outcome.COMPLETED,
        censored_time=cens,
    )


def write_swf(path, recs) -> None:
    """``recs`` as a minimal SWF file (wait 0, 2 processors) for the CLI tests."""
    lines = ["; UnixStartTime: 0"]
    for r in recs:
        lines.append(
            f"{r.job_id} {r.submit_time:.0f} 0 {r.used_time_s:.0f} 2 -1 -1 2 {r.req_time_s:.0f} -1 1 "
            f"{r.user[1:]} 1 -1 -1 1 -1 -1"
        )
    path.write_text("\n".join(lines) + "\n")


def metric_row(model: str, over: float, score: float, **kw) -> ModelMetrics:
    """A ``ModelMetrics`` row for the verdict tests: 100 jobs, ``over`` of over-reservation, ``score``."""
    base = dict(
        model=model,
        jobs=100,
        changed=0.5,
        under_rate=0.01,
        under_jobs=1,
        lost=0,
        reserved_over_used=1.5,
        over_reservation=over,
        over_vs_request=over / 7200.0,
        consumed_over_used=1.1,
        consumed_vs_request=0.9,
        killed=3600.0,
        score=score,
        used_total=10 * 3600.0,
        killed_jobs=2,
    )
    base.update(kw)
    return ModelMetrics(**base)


def replay_report(*rows: ModelMetrics, relative: bool = True, limits: str = "hard") -> ReplayReport:
    """A ``ReplayReport`` of ``rows`` on a 100-job trace, as `harp replay` builds it."""
    return ReplayReport(
        trace="t.swf",
        source="t",
        resource="time",
        relative=relative,
        jobs=100,
        skipped={},
        retrains=1,
        seconds=1.0,
        alpha=0.05,
        weight="cores",
        unit="core-hours",
        unit_scale=3600.0,
        models=rows,
        targets={},
        notes=[],
        limits=limits,
        soft_policy=None,
    )
