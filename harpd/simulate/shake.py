"""Input shaking: the queue figures as the mean over slightly perturbed copies of a trace.

One simulation of a real trace is one draw from a chaotic system.  Moving
every job's submission by up to a minute at random (a change no user would
notice) moves CTC-SP2's mean wait under the users' own requests by 6-12%
and its mean bounded slowdown by 7-11% (docs/metrics.md, "Queue"): more
than most differences between the policies being compared.  Tsafrir,
Ouaknine and Feitelson ("Reducing performance evaluation sensitivity and
variability by input shaking", MASCOTS 2007) showed this for EASY on the
same logs and proposed the remedy used here: simulate many shaken copies
and report the average.

Every policy is simulated on the *same* shaken copies (common random
numbers), so a comparison between two policies is paired: per copy, the
relative difference of their figures, then its mean and standard error.
Copy 0 is the trace as recorded.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import fields
from typing import Any, TypedDict

import numpy as np

from harpd.simulate.easy import simulate
from harpd.simulate.schedule import Summary
from harpd.simulate.workload import LimitPolicy, Workload

__all__ = ["shaken", "simulate_shaken", "paired", "PAIRED_FIGURES"]

#: the figures compared pairwise between policies (mean and standard error of the relative difference)
PAIRED_FIGURES = ("mean_wait_s", "mean_bounded_slowdown")

#: how many standard errors make a difference clear (about 95% two-sided)
CLEAR = 2.0


def shaken(work: Workload, amplitude_s: float, rng: np.random.Generator) -> Workload:
    """``work`` with each submission moved by a uniform amount in ±``amplitude_s`` (never before 0)."""
    if amplitude_s <= 0:
        return work
    sub = np.maximum(work.submit + rng.uniform(-amplitude_s, amplitude_s, len(work)), 0.0)
    return Workload(sub, work.procs, work.runtime)


def simulate_shaken(
    work: Workload,
    policies: Sequence[LimitPolicy],
    procs: int,
    *,
    replicas: int = 1,
    amplitude_s: float = 60.0,
    seed: int = 0,
    progress: Callable[[str], Callable[[int, int], None] | None] | None = None,
) -> dict[str, list[Summary]]:
    """Every policy on each of ``replicas`` copies (copy 0 as recorded): policy name -> one Summary per copy.

    A policy that cannot differ from one before it (same mode, limits and
    watcher, neither with a hook: e.g. harp under hard limits where it cut
    nothing) is not simulated again: its summaries are that policy's, renamed.
    """
    if replicas < 1:
        raise ValueError(f"replicas {replicas}: at least one copy of the trace is simulated")
    rng = np.random.default_rng(seed)
    out: dict[str, list[Summary]] = {p.name: [] for p in policies}
    for r in range(replicas):
        w = work if r == 0 else shaken(work, amplitude_s, rng)
        for k, pol in enumerate(policies):
            twin = next((q for q in policies[:k] if _same(q, pol)), None)
            if twin is not None:
                out[pol.name].append(dataclasses.replace(out[twin.name][-1], policy=pol.name))
                continue
            label = pol.name if replicas == 1 else f"{pol.name} {r + 1}/{replicas}"
            out[pol.name].append(simulate(w, pol, procs, progress=progress(label) if progress else None).summary())
    return out


def _same(a: LimitPolicy, b: LimitPolicy) -> bool:
    """Whether two policies make the same schedule by construction (no hook: nothing to tell them apart)."""
    return (
        a.on_limit is None
        and b.on_limit is None
        and a.on_submit is None
        and b.on_submit is None
        and a.mode == b.mode
        and a.lead_s == b.lead_s
        and a.look_s == b.look_s
        and np.array_equal(a.limit, b.limit)
    )


def mean_row(summaries: Sequence[Summary]) -> dict[str, Any]:
    """One policy's row: every figure averaged over the copies, with the standard error of the paired ones."""
    out: dict[str, Any] = dataclasses.asdict(summaries[0])  # the row leaves as JSON: the one dict
    n = len(summaries)
    for f in fields(Summary):
        if f.type not in ("int", "float", int, float):
            continue
        m = float(np.mean(np.array([getattr(s, f.name) for s in summaries], float)))
        out[f.name] = int(round(m)) if f.type in ("int", int) else m  # counts: the mean, rounded
    for k in PAIRED_FIGURES:
        vals = np.array([getattr(s, k) for s in summaries], float)
        out[f"{k}_se"] = float(np.std(vals, ddof=1) / math.sqrt(n)) if n > 1 else None
        # per copy (None: no job simulated): how many copies the mean needs
        out[f"{k}_copies"] = [float(v) if math.isfinite(v) else None for v in vals]
    out["replicas"] = n
    return out


class Paired(TypedDict, total=False):
    """One figure of ``other`` against ``base``: the mean relative difference, its standard error, the verdict.

    The copy counts are there whenever some copy had jobs to compare.
    """

    rel_diff: float | None
    se: float | None
    verdict: str
    copies: int
    higher_copies: int
    lower_copies: int


def paired(base: Sequence[Summary], other: Sequence[Summary]) -> dict[str, Paired]:
    """``other`` against ``base`` copy by copy: mean relative difference, its standard error and a verdict.

    The verdict is "lower" or "higher" when the mean difference is more
    than two standard errors from 0, else "no clear difference" (and
    "one copy" when there is nothing to estimate the error from).
    """
    out: dict[str, Paired] = {}
    for k in PAIRED_FIGURES:
        a = np.array([getattr(s, k) for s in base], float)
        b = np.array([getattr(s, k) for s in other], float)
        ok = np.isfinite(a) & np.isfinite(b) & (a > 0)
        if not ok.any():
            out[k] = {"rel_diff": None, "se": None, "verdict": "no jobs"}
            continue
        d = b[ok] / a[ok] - 1.0
        mean = float(np.mean(d))
        se: float | None = None
        if len(d) < 2:
            verdict = "one copy"
        else:
            se = float(np.std(d, ddof=1) / math.sqrt(len(d)))
            verdict = "lower" if mean < -CLEAR * se else "higher" if mean > CLEAR * se else "no clear difference"
        out[k] = Paired(
            rel_diff=mean,
            se=se,
            verdict=verdict,
            # how many copies went each way: a mean within its noise may still lean one way, said in words
            copies=len(d),
            higher_copies=int(np.sum(d > 0)),
            lower_copies=int(np.sum(d < 0)),
        )
    return out
