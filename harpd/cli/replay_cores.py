"""The cores part of ``harp replay`` (``--resource cpus``): core-hours users vs harp, share slowed.

Kept apart from the time/memory replay: the cores rule needs no model and no
features, only each job's signature, request and CPU time
(``harpd.evaluate.cores_replay``), so it reads the trace once and is done in
well under a second for a workflow trace.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypedDict

if TYPE_CHECKING:  # `harp --help` does not load numpy
    from harpd.evaluate.cores_replay import CoreFigures


class CoresSet(TypedDict):
    """One set of jobs' core-hours: the users' requests, harp's, used, clairvoyant, and the share slowed."""

    jobs: int
    users_core_h: float
    harp_core_h: float
    used_core_h: float
    clairvoyant_core_h: float
    harp_share: float
    changed: int
    slowed: int
    slowed_share: float
    slowed_within_tolerance: int


class CoresFigures(TypedDict):
    """``harp replay --resource cpus``'s figures, as ``--format json`` prints them."""

    trace: str
    resource: str
    alpha: float
    cores_tolerance: float
    multi_cpu: CoresSet  # the jobs that asked for more than one CPU (the rule's own)
    all: CoresSet


def report(trace: str, alpha: float, settings: Any = None) -> CoresFigures:
    """The cores figures of ``trace``; a trace without CPU time gives a one-line ReplayError.

    ``settings``: the site's (its ``predict.cores_tolerance`` and rails), as harpd runs them.
    """
    from harpd.evaluate.cores_replay import replay_cores
    from harpd.replay.dataset import ReplayError, read_trace

    res = replay_cores(read_trace(trace), alpha, settings)
    if not res.all.jobs:
        raise ReplayError(
            f"{trace}: no job with CPU time (TotalCPU, %cpu) and a CPU request: nothing to replay for cores"
        )
    return CoresFigures(
        trace=str(trace),
        resource="cpus",
        alpha=alpha,
        cores_tolerance=res.multi.tolerance,
        multi_cpu=_figures(res.multi),
        all=_figures(res.all),
    )


def _figures(f: CoreFigures) -> CoresSet:
    """One set's figures (``harpd.evaluate.cores_replay``'s), rounded as printed."""
    return CoresSet(
        jobs=f.jobs,
        users_core_h=round(f.users_core_h, 3),
        harp_core_h=round(f.harp_core_h, 3),
        used_core_h=round(f.used_core_h, 3),
        clairvoyant_core_h=round(f.best_core_h, 3),
        harp_share=round(f.share, 4),
        changed=f.changed,
        slowed=f.slowed,
        slowed_share=round(f.slowed_share, 4),
        slowed_within_tolerance=f.slowed_at_all - f.slowed,
    )


def render(rep: CoresFigures) -> str:
    """The figures as a small table: one row per set of jobs."""
    lines = [
        f"{rep['trace']}: cores for single-task jobs (alpha {rep['alpha']:g}, "
        f"cores_tolerance {rep['cores_tolerance']:g})",
        f"{'jobs':24} {'n':>7} {'users core-h':>13} {'harp core-h':>12} {'harp/users':>10} {'used core-h':>12}"
        f" {'clairvoyant':>12} {'slowed':>8}",
    ]
    for f, label in ((rep["multi_cpu"], "asked for > 1 CPU"), (rep["all"], "all")):
        lines.append(
            f"{label:24} {f['jobs']:>7,} {f['users_core_h']:>13,.1f} {f['harp_core_h']:>12,.1f} "
            f"{f['harp_share']:>10.3f} {f['used_core_h']:>12,.1f} {f['clairvoyant_core_h']:>12,.1f} "
            f"{f['slowed_share']:>8.2%}"
        )
    lines.append(
        f"slowed: jobs that used more than {1 + rep['cores_tolerance']:g} x the cores harp gave (slowed within "
        "that, their time limit holds it); clairvoyant: each job its own cores used, in whole cores"
    )
    return "\n".join(lines) + "\n"
