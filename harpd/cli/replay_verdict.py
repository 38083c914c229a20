"""The plain verdict `harp replay` prints first: would harp have beaten the users' own requests?

A sysadmin deciding whether to run harp needs one sentence and the figures
behind it, in the trace's own units: how much reservation harp frees, what it
costs (jobs killed or extended, core-hours burned in killed attempts) and the
consumption against the users' requests.  The table below it is for people
who compare models.

Who is better is decided by the harp score (docs/metrics.md), the same
formula for both rows: over-reservation and killed attempts per unit of work,
plus one average job of disruption per job harp kills and the steep penalty
past the miss budget.  A reservation saving that does not pay for harp's kills
therefore counts for the users' requests, as it should: a killed job is a
user's lost afternoon, a held core-hour is only a planning loss.
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Any

from harpd.cli.replay_report import ReplayReport, Verdict

if TYPE_CHECKING:
    from harpd.report.queue_figures import PairedFigure, QueueFigures

MODEL = "harp"
USERS = "request"
# relative score difference below which one side is only "slightly" better
SLIGHT = 0.02


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and math.isfinite(v) else None


def verdict(rep: ReplayReport) -> Verdict:
    """The verdict of a replay's report: figures, who is better, and the lines to print."""
    h, u = rep.row(MODEL), rep.row(USERS)
    if not rep.relative:
        return Verdict.none("this trace has no users' requests to compare harp with")
    if h is None or u is None:
        return Verdict.none(f"add {MODEL} and {USERS} to --models to compare harp with the users' own requests")
    scale, unit = rep.unit_scale, rep.unit
    soft = rep.limits == "soft"
    saved = (u.over_reservation - h.over_reservation) / scale
    ov = _num(h.over_vs_request)
    co = _num(h.consumed_vs_request)
    consumed_u = (_num(u.consumed_over_used) or 0.0) * (_num(u.used_total) or 0.0)
    consumed_h = (_num(h.consumed_over_used) or 0.0) * (_num(h.used_total) or 0.0)
    extra = (consumed_h - consumed_u) / scale
    hs, us = _num(h.score), _num(u.score)
    better, margin = _compare(hs, us)
    v = Verdict(
        better=better,
        text=(),
        model=MODEL,
        limits=rep.limits,
        unit=unit,
        reserved_saved=saved,
        reserved_saved_share=None if ov is None else 1.0 - ov,
        over_reservation_vs_users=ov,
        consumed_vs_users=co,
        consumed_extra=extra,
        killed_jobs=int(h.killed_jobs),
        killed=h.killed / scale,
        harp_kills=int(h.harp_kills or 0),
        harp_killed=h.harp_killed / scale,
        users_kills=int(u.killed_jobs),
        lost=int(h.lost or 0),
        extended_jobs=(round((_num(h.extended_share) or 0.0) * h.jobs) if soft else None),
        missed_share=_num(h.under_rate),
        score=hs,
        users_score=us,
        margin=margin,
    )
    return dataclasses.replace(v, text=tuple(_lines(v, rep)))


def _compare(hs: float | None, us: float | None) -> tuple[str | None, str | None]:
    if hs is None or us is None:
        return None, None
    if math.isclose(hs, us, rel_tol=1e-9, abs_tol=1e-12):
        return "same", None
    rel = abs(hs - us) / max(abs(us), abs(hs), 1e-12)
    return ("harp" if hs < us else "users"), ("slightly" if rel < SLIGHT else "clearly")


def _amount(v: float, unit: str) -> str:
    return f"{abs(v):,.0f} {unit}"


def _share(v: float | None) -> str:
    return "-" if v is None else f"{abs(v):.1%}"


def _lines(v: Verdict, rep: ReplayReport) -> list[str]:
    unit, jobs = v.unit, rep.jobs
    word = {"slightly": "slightly ", "clearly": ""}.get(v.margin or "", "")
    saved, share = v.reserved_saved, v.reserved_saved_share
    if v.better == "harp":
        head = f"verdict: harp would have been {word}better than the users' own requests on this trace"
    elif v.better == "users":
        head = f"verdict: the users' own requests would have been {word}better than harp on this trace"
        if saved > 0:
            head += ": what harp saves does not pay for the jobs it kills"
    elif v.better == "same":
        head = "verdict: harp and the users' own requests come out the same on this trace"
    else:
        head = "verdict: none (no score to compare on this trace)"
    lines = [head + "."]
    held = "final limits" if v.limits == "soft" else "limits"
    lines.append(
        f"  reserved: harp's {held} hold {_amount(saved, unit)} ({_share(share)}) "
        f"{'less' if saved >= 0 else 'MORE'} beyond use than the users' requests"
    )
    if v.limits == "soft":
        ext = v.extended_jobs or 0
        budget = None if rep.soft_policy is None else rep.soft_policy["extension_budget"]
        allowed = f" (allowed {budget:.0%}: predict.soft_extension_budget)" if budget is not None else ""
        lines.append(
            f"  extended: {ext:,} jobs ({ext / jobs if jobs else 0:.1%}) extended while running{allowed}; "
            f"{v.killed_jobs:,} killed below their own request"
        )
    else:
        lines.append(_killed_line(v, jobs))
    co = v.consumed_vs_users
    if co is not None:
        more = "more" if v.consumed_extra >= 0 else "less"
        lines.append(f"  consumed: {co:.3f} x the users' ({_amount(v.consumed_extra, unit)} {more})")
    if v.limits != "soft":
        lines.append(
            f"  missed:   {v.missed_share:.1%} of the jobs that fit their request ran out at harp's first "
            f"limit (allowed {rep.alpha:.0%}: predict.alpha_{rep.resource})"
        )
    return lines


def _killed_line(v: Verdict, jobs: int) -> str:
    """Who killed what under hard limits: harp's cuts, run again larger, apart from the users' own kills.

    A job harp left at its request is stopped where the trace stopped it (it
    ran past what its user asked): that kill is the users', abandoned as in
    the trace, not run again; only a kill below the request is harp's.
    """
    k, uk = v.harp_kills, v.users_kills
    if k:
        line = (
            f"  killed:   harp killed {_jobs(k)} ({k / jobs if jobs else 0:.1%}) below their request; each "
            f"ran again with more, burning {_amount(v.harp_killed, v.unit)}"
        )
        if v.lost:
            line += f"; {v.lost:,} ran out of attempts (resubmitted by hand)"
    else:
        line = "  killed:   harp killed no job below its request"
    if uk:
        line += (
            f"; the users' own requests stop {_jobs(uk)} ({uk / jobs if jobs else 0:.1%}) that ran past them "
            "(as in the trace: not run again)"
        )
    return line


def _jobs(n: int) -> str:
    return f"{n:,} job{'' if n == 1 else 's'}"


def with_queue(v: Verdict, queue: QueueFigures, limits: str) -> Verdict:
    """The verdict once the queue was simulated: the queue decides the headline, read first.

    The queue is the outcome a site deploys harp for, the over-reservation
    only its proxy: harp is called better only when the queue (mean wait and
    bounded slowdown) is no worse and its limits score no worse either.
    """
    words = queue_lines(queue, limits)
    cmp = (queue.get("vs_users") or {}).get(f"harp-{limits}") or {}
    ways = {f: (cmp.get(f) or {}).get("verdict") for f in ("mean_wait_s", "mean_bounded_slowdown")}
    names = {"mean_wait_s": "mean wait", "mean_bounded_slowdown": "mean bounded slowdown"}
    raised = [names[f] for f, w in ways.items() if w == "higher"]
    lowered = [names[f] for f, w in ways.items() if w == "lower"]
    rest = list(v.text[1:]) if v.figures else list(v.text)
    if not cmp or not v.figures:
        return dataclasses.replace(v, queue=tuple(words), text=tuple(words) + v.text)
    if raised:
        better = "users"
        head = (
            "verdict: the users' own requests would have been better than harp on this trace: harp raised "
            f"the queue's {' and '.join(raised)}"
        )
        if v.reserved_saved > 0:
            head += ", whatever its limits free"
    elif v.better == "harp":
        better = "harp"
        how = f"it lowered the queue's {' and '.join(lowered)}" if lowered else "the queue is no worse"
        head = v.text[0].rstrip(".") + f": {how}"
    elif lowered and v.better == "users":
        better = "mixed"
        head = (
            f"verdict: mixed: harp lowered the queue's {' and '.join(lowered)}, but its limits score worse "
            "than the users' own requests (the table below)"
        )
    else:
        better = v.better or "same"
        head = v.text[0].rstrip(".")
    return dataclasses.replace(v, better=better, queue=tuple(words), text=(head + ".", *words, *rest))


def _effect(c: PairedFigure | None, what: str) -> str:
    """One figure of a paired comparison in words: 'lowered the mean wait by 5.4% (±0.5%)'."""
    d = None if c is None else _num(c.get("rel_diff"))
    if c is None or d is None:
        return f"{what}: not measured"
    se = _num(c.get("se"))
    pm = "" if se is None else f" (±{se:.1%})"
    if c.get("verdict") == "lower":
        return f"lowered {what} by {-d:.1%}{pm}"
    if c.get("verdict") == "higher":
        return f"RAISED {what} by {d:.1%}{pm}"
    if abs(d) < 1e-12 and not se:
        return f"left {what} unchanged"
    lean = ""
    n, up, down = c.get("copies"), c.get("higher_copies"), c.get("lower_copies")
    if isinstance(n, int) and n > 1 and isinstance(up, int) and isinstance(down, int) and max(up, down) * 2 > n:
        lean = f"; {'higher' if up > down else 'lower'} in {max(up, down)} of {n} copies"
    if c.get("verdict") == "one copy":
        return f"changed {what} by {d:+.1%} (one copy of the trace: no error to judge it by)"
    return f"did not clearly change {what} ({d:+.1%}{pm}, within two standard errors{lean})"


def queue_lines(queue: QueueFigures, limits: str) -> list[str]:
    """The queue's verdict, printed first: what harp did to waits and slowdown under ``limits``.

    The queue is the outcome a site deploys harp for, the
    over-reservation only its proxy, so an admin reads this before the rest.
    """
    row = f"harp-{limits}"
    cmp = (queue.get("vs_users") or {}).get(row)
    if cmp is None:
        return [f"queue: no harp-{limits} row to judge ({'; '.join(queue.get('notes') or []) or 'not simulated'})."]
    copies = queue.get("replicas", 1)
    rows = {p["policy"]: p for p in queue.get("policies") or []}
    h = rows.get(row) or {}
    head = (
        f"queue verdict: under {limits} limits harp {_effect(cmp.get('mean_wait_s'), 'the mean wait')} and "
        f"{_effect(cmp.get('mean_bounded_slowdown'), 'the mean bounded slowdown')} against the users' own "
        f"requests ({copies} cop{'y' if copies == 1 else 'ies'} of the trace, EASY backfilling on "
        f"{queue.get('procs')} processors)."
    )
    lines = [head]
    users = rows.get("users") or {}
    own = int(h.get("harp_kills", max(0, (h.get("kills") or 0) - (users.get("kills") or 0))))
    theirs = (h.get("kills") or 0) - own
    by_users = (
        f"{theirs:,} runs reached the users' own requests in the simulated queue (stopped as in the trace, "
        "not run again)"
    )
    if limits == "hard":
        if own == 0:
            lines.append(
                "  harp killed no job: under hard limits it cut only where a cut outweighs a kill's cost "
                f"(predict.hard_cut_gain); {by_users}"
            )
        else:
            lines.append(
                f"  harp's cuts killed {own:,} runs (each loses its partial run and queues the job again); {by_users}"
            )
    else:
        lines.append(
            f"  {h.get('extensions', 0):,} extensions (each one counted; the replay's 'extended' counts jobs, "
            f"on the recorded timeline), {own:,} kills by harp; {by_users}"
        )
        lines.append("  " + loop_line(queue.get("soft_loop"), bool(queue.get("queue_rule"))))
    return lines


def loop_line(loop: str | None, queue_rule: bool = False) -> str:
    """Which harp-soft the queue figures are of: decided inside the simulated queue, or on the recorded timeline."""
    if loop == "closed" and queue_rule:
        return (
            "harp-soft decided in a closed loop with the queue rule (predict.queue_rule, on by default): each "
            "job's limit at its submission in the simulated queue; behind waiting work that outlasts its request "
            "only a cut to a quarter of it or less stands, a shallower one is planned with the request"
        )
    if loop == "closed":
        return (
            "harp-soft decided in a closed loop without the queue rule (--no-queue-rule, or predict.queue_rule "
            "off): each job's limit asked for at its submission in the simulated queue reads no queue, so these "
            "are the open loop's figures"
        )
    if loop == "open":
        return (
            "harp-soft decided in an open loop (--open-loop): the replay's limits on the recorded timeline, "
            "blind to the simulated queue"
        )
    return "harp-soft: no record of how its limits were decided"
