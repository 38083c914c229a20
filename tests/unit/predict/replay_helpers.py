"""Trace records for the replay tests: one job with round numbers per call."""

from __future__ import annotations

from harpd.records import JobRecord, Outcome


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
