"""The cores part of ``harp replay`` (``--resource cpus``): core-hours users vs harp, share slowed.

Kept apart from the time/memory replay: the cores rule needs no model and no
features, only each job's signature, request and CPU time
(``harpd.evaluate.cores_replay``), so it reads the trace once and is done in
well under a second for a workflow trace.
"""

from __future__ import annotations

from typing import Any


def report(trace: str, alpha: float, settings: Any = None) -> dict[str, Any]:
    """The cores figures of ``trace`` as a dict; a trace without CPU time gives a one-line ReplayError.

    ``settings``: the site's (its ``predict.cores_tolerance`` and rails), as harpd runs them.
    """
    from harpd.evaluate.cores_replay import replay_cores
    from harpd.replay.dataset import ReplayError, read_trace

    res = replay_cores(read_trace(trace), alpha, settings)
    if not res.all.jobs:
        raise ReplayError(
            f"{trace}: no job with CPU time (TotalCPU, %cpu) and a CPU request: nothing to replay for cores"
        )
    tolerance = res.multi.tolerance
    out: dict[str, Any] = {"trace": str(trace), "resource": "cpus", "alpha": alpha, "cores_tolerance": tolerance}
    for name, f in (("multi_cpu", res.multi), ("all", res.all)):
        out[name] = {
            "jobs": f.jobs,
            "users_core_h": round(f.users_core_h, 3),
            "harp_core_h": round(f.harp_core_h, 3),
            "used_core_h": round(f.used_core_h, 3),
            "clairvoyant_core_h": round(f.best_core_h, 3),
            "harp_share": round(f.share, 4),
            "changed": f.changed,
            "slowed": f.slowed,
            "slowed_share": round(f.slowed_share, 4),
            "slowed_within_tolerance": f.slowed_at_all - f.slowed,
        }
    return out


def render(rep: dict[str, Any]) -> str:
    """The figures as a small table: one row per set of jobs."""
    lines = [
        f"{rep['trace']}: cores for single-task jobs (alpha {rep['alpha']:g}, "
        f"cores_tolerance {rep['cores_tolerance']:g})",
        f"{'jobs':24} {'n':>7} {'users core-h':>13} {'harp core-h':>12} {'harp/users':>10} {'used core-h':>12}"
        f" {'clairvoyant':>12} {'slowed':>8}",
    ]
    for key, label in (("multi_cpu", "asked for > 1 CPU"), ("all", "all")):
        f = rep[key]
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
