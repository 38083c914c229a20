"""Checkpoint schedules for resumable training jobs: denser early (COCI) against even (Young/Daly).

A job that can checkpoint loses, at an interruption (node failure, preemption,
time limit), only the work since its last checkpoint; each checkpoint costs
``C`` seconds of no progress.  With interruptions at a constant rate lambda the
even interval of Young (sqrt(2C/lambda)), refined by Daly, minimises the
expected time lost.  COCI (convergence-aware checkpointing of exploratory
training) argues for checkpoints denser early: early training makes most of
the convergence progress, so losing it costs more.  harp's schedule makes the
local interval
    tau(t) = sqrt(2 C / (h(t) * w(t)))
where h(t) is the site's interruption hazard at job age t (from sacct: node
failures, preemptions and time-outs per job-hour, by age bin) and w(t) the
convergence value density of a power-law loss curve L ~ (t + t0)^-k (progress
rate ~ (t + t0)^-(k+1), normalised to mean 1 over the run).  With w = 1 and a
constant hazard it is Young's interval; ``simulate`` replays the same
interruption traces through any schedule so the two can be compared.

``#HARP checkpoint cost=2m converge=0.5`` (or ``--signal`` with
``--requeue``) marks a job resumable; ``harp dnn checkpoint`` prints the
schedule.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypedDict

from harpd.dnn.errors import DnnError
from harpd.dnn.goals import parse_duration
from harpd.dnn.harp_line import harp_line_words
from harpd.recovery.resume import signal_declared

AGE_BINS_H = (0.0, 1.0, 4.0, 12.0, 24.0, 72.0, math.inf)
INTERRUPTIONS = ("node_fail", "preempted", "timeout")
MAX_CHECKPOINTS = 10_000
CHECKPOINT_KEYS = ("cost", "converge", "t0", "horizon", "rate", "signal", "lead")
DEFAULT_SIGNAL = "USR1"
DEFAULT_LEAD_S = 120.0


@dataclass(frozen=True)
class CheckpointSpec:
    """``#HARP checkpoint cost=2m converge=0.5 t0=30m horizon=48h rate=0.02``."""

    cost_s: float
    converge: float = 0.5  # k of L ~ (t + t0)^-k; 0: value flat (pure time)
    t0_s: float = 1800.0
    horizon_s: float | None = None
    rate_per_h: float | None = None  # interruptions per job-hour (default: the site's)


def _float(key: str, value: str, lo: float, hi: float) -> float:
    try:
        v = float(value)
    except ValueError:
        raise DnnError(f"#HARP checkpoint: {key}={value} is not a number") from None
    if not lo <= v <= hi or math.isnan(v):
        raise DnnError(f"#HARP checkpoint: {key}={value} is out of range ({lo:g} to {hi:g})")
    return v


def checkpoint_tokens(harp_lines: Iterable[str]) -> dict[str, str] | None:
    """KEY=VALUE of the ``#HARP checkpoint`` lines; None when there is none."""
    found, out = False, {}
    for raw in harp_lines:
        try:
            words = harp_line_words(raw)
        except ValueError:
            continue
        if not words or words[0].lower() != "checkpoint":
            continue
        found = True
        for w in words[1:]:
            k, sep, v = w.partition("=")
            if not sep or not v:
                raise DnnError(f"#HARP checkpoint: '{w}' is not KEY=VALUE (e.g. cost=2m)")
            out[k.lower()] = v
    return out if found else None


@dataclass(frozen=True)
class SignalPlan:
    """When and how harpd asks a resumable job to checkpoint: ``signal`` to its batch shell, ``lead_s``
    before its current end (``#HARP checkpoint signal=USR1 lead=2m``; harpd.watch.checkpoint_signal)."""

    signal: str = DEFAULT_SIGNAL
    lead_s: float = DEFAULT_LEAD_S


def signal_plan(harp_lines: Iterable[str]) -> SignalPlan | None:
    """The checkpoint signal of a job with a ``#HARP checkpoint`` line; None without one.

    Raises DnnError for a wrong ``signal=`` or ``lead=`` (the caller says it and leaves the job alone).
    """
    tokens = checkpoint_tokens(list(harp_lines))
    if tokens is None:
        return None
    name = tokens.get("signal", DEFAULT_SIGNAL).upper().removeprefix("SIG")
    if not (name.isalnum() and 1 <= len(name) <= 8):
        raise DnnError(f"#HARP checkpoint: signal={tokens['signal']} is not a signal name (e.g. signal=USR1)")
    lead = _seconds("lead", tokens["lead"]) if "lead" in tokens else DEFAULT_LEAD_S
    return SignalPlan(name, lead)


def spec_from_tokens(tokens: dict[str, str]) -> CheckpointSpec:
    unknown = sorted(set(tokens) - set(CHECKPOINT_KEYS))
    if unknown:
        raise DnnError(f"#HARP checkpoint: unknown key '{unknown[0]}' (known: {', '.join(CHECKPOINT_KEYS)})")
    if "cost" not in tokens:
        raise DnnError("#HARP checkpoint: give cost= (how long one checkpoint takes, e.g. cost=2m)")
    cost = _seconds("cost", tokens["cost"])
    kw: dict = {"cost_s": cost}
    if "converge" in tokens:
        kw["converge"] = _float("converge", tokens["converge"], 0.0, 5.0)
    if "t0" in tokens:
        kw["t0_s"] = _seconds("t0", tokens["t0"])
    if "horizon" in tokens:
        kw["horizon_s"] = parse_duration("horizon", tokens["horizon"])
    if "rate" in tokens:
        kw["rate_per_h"] = _float("rate", tokens["rate"], 1e-6, 100.0)
    return CheckpointSpec(**kw)


def _seconds(key: str, value: str) -> float:
    """Like parse_duration but down to one second (a checkpoint can take seconds)."""
    v = value.strip().lower()
    units = {"s": 1, "m": 60, "min": 60, "h": 3600}
    for u in sorted(units, key=len, reverse=True):
        if v.endswith(u):
            num = v[: -len(u)]
            break
    else:
        num, u = v, "s"
    try:
        s = float(num) * units[u]
    except ValueError:
        raise DnnError(f"#HARP checkpoint: {key}={value} is not a duration (e.g. {key}=90s or 2m)") from None
    if not 1 <= s <= 86400:
        raise DnnError(f"#HARP checkpoint: {key}={value} is out of range (1 second to 1 day)")
    return s


def resumable(harp_lines: Iterable[str], signal_s: int | None, requeue: bool | None) -> str | None:
    """Why the job counts as resumable (None: it does not): a checkpoint line, or --signal with --requeue."""
    if checkpoint_tokens(list(harp_lines)) is not None:
        return "#HARP checkpoint line"
    if signal_declared(signal_s, requeue):
        return f"--signal (@{signal_s}s) with --requeue"
    return None


# ------------------------------------------------------------------ the site's interruption hazard


@dataclass(frozen=True)
class Hazard:
    """Interruptions per job-hour by job age (bins of AGE_BINS_H), from finished jobs."""

    per_hour: tuple[float, ...]
    events: int
    hours: float

    def at(self, t_s: float) -> float:
        h = t_s / 3600
        for i in range(len(AGE_BINS_H) - 1):
            if h < AGE_BINS_H[i + 1]:
                return self.per_hour[i]
        return self.per_hour[-1]

    @property
    def mean(self) -> float:
        return self.events / self.hours if self.hours else 0.0


def hazard_from_jobs(jobs: Iterable[tuple[str, float]], floor_per_h: float = 1e-4) -> Hazard:
    """(outcome, elapsed seconds) of finished jobs -> interruption hazard by age.

    Each job is exposed in every age bin up to its elapsed time; an interrupted
    job adds its event to the bin it ended in.  Bins with too little exposure
    (under 10 job-hours) take the overall rate, so a quiet tail does not
    read as no risk.
    """
    nb = len(AGE_BINS_H) - 1
    expo = [0.0] * nb
    ev = [0] * nb
    total_ev = 0
    for outcome, elapsed in jobs:
        if elapsed is None or elapsed <= 0:
            continue
        h = elapsed / 3600
        for i in range(nb):
            lo, hi = AGE_BINS_H[i], AGE_BINS_H[i + 1]
            if h <= lo:
                break
            expo[i] += min(h, hi) - lo
            if h <= hi and str(outcome).lower() in INTERRUPTIONS:
                ev[i] += 1
                total_ev += 1
    hours = sum(expo)
    mean = max(floor_per_h, total_ev / hours) if hours else floor_per_h
    rates = tuple(max(floor_per_h, ev[i] / expo[i]) if expo[i] >= 10 else mean for i in range(nb))
    return Hazard(rates, total_ev, hours)


def constant_hazard(rate_per_h: float) -> Hazard:
    return Hazard(tuple([rate_per_h] * (len(AGE_BINS_H) - 1)), 0, 0.0)


# ------------------------------------------------------------------ schedules


def value_density(k: float, t0_s: float, horizon_s: float) -> Callable[[float], float]:
    """w(t) ~ (t + t0)^-(k+1), mean 1 over [0, horizon]; k = 0 gives w = 1 (time only)."""
    if k <= 0:
        return lambda t: 1.0
    # mean of (t+t0)^-(k+1) over [0,H] = (t0^-k - (H+t0)^-k) / (k H)
    mean = (t0_s**-k - (horizon_s + t0_s) ** -k) / (k * horizon_s)
    return lambda t: (t + t0_s) ** -(k + 1) / mean


def young_daly(cost_s: float, rate_per_h: float) -> float:
    """Daly's interval (Young's sqrt(2 C M) with Daly's correction), seconds; M = 1/rate."""
    m = 3600.0 / rate_per_h
    if cost_s >= 2 * m:
        return m
    return math.sqrt(2 * cost_s * m) * (1 + math.sqrt(cost_s / (2 * m)) / 3 + cost_s / (18 * m)) - cost_s


def even_schedule(cost_s: float, rate_per_h: float, horizon_s: float) -> list[float]:
    tau = max(young_daly(cost_s, rate_per_h), cost_s)
    n = min(MAX_CHECKPOINTS, int(horizon_s // tau))
    return [tau * (i + 1) for i in range(n) if tau * (i + 1) < horizon_s]


def coci_schedule(cost_s: float, hazard: Hazard, horizon_s: float, k: float, t0_s: float) -> list[float]:
    """Work positions of checkpoints: local interval sqrt(2C/(h(t) w(t))), denser where progress is fast."""
    w = value_density(k, t0_s, horizon_s)
    out: list[float] = []
    t = 0.0
    while len(out) < MAX_CHECKPOINTS:
        tau = math.sqrt(2 * cost_s * 3600.0 / (hazard.at(t) * w(t)))
        t += max(tau, cost_s)
        if t >= horizon_s:
            break
        out.append(t)
    return out


# ------------------------------------------------------------------ simulation


@dataclass(frozen=True)
class Overhead:
    checkpoint_s: float  # time spent writing checkpoints
    redo_s: float  # work redone after interruptions
    redo_value: float  # the same, weighted by convergence value w (progress-equivalent seconds)

    @property
    def time_s(self) -> float:
        return self.checkpoint_s + self.redo_s

    @property
    def weighted_s(self) -> float:
        return self.checkpoint_s + self.redo_value


def failure_trace(rng: random.Random, horizon_wall_s: float, hazard_at: Callable[[float], float]) -> list[float]:
    """Interruption times (wall seconds since the job's start) by thinning, for a hazard of wall age.

    Age restarts at each interruption (the requeued job is a new allocation),
    which the simulator applies; here: the gaps, drawn from the age hazard.
    """
    out: list[float] = []
    hmax = max(hazard_at(a) for a in (0, 1800, 3600, 4 * 3600, 12 * 3600, 24 * 3600, 72 * 3600)) / 3600.0
    t = 0.0
    age = 0.0
    while t < horizon_wall_s and len(out) < 100_000:
        step = rng.expovariate(hmax)
        t += step
        age += step
        if rng.random() < hazard_at(age) / 3600.0 / hmax:
            out.append(t)
            age = 0.0
    return out


def simulate(
    schedule: Sequence[float],
    cost_s: float,
    horizon_s: float,
    failures: Sequence[float],
    w: Callable[[float], float],
    restart_s: float = 0.0,
) -> Overhead:
    """Run ``horizon_s`` of work with checkpoints at work positions ``schedule`` through wall-time ``failures``."""
    ckpts = list(schedule)
    wall = 0.0
    pos = 0.0
    last = 0.0
    nxt = 0
    ck_time = redo = redo_v = 0.0
    fi = 0
    guard = 0
    while pos < horizon_s and guard < 1_000_000:
        guard += 1
        while nxt < len(ckpts) and ckpts[nxt] <= last:
            nxt += 1
        target = ckpts[nxt] if nxt < len(ckpts) else horizon_s
        seg_work = target - pos
        seg_wall = seg_work + (cost_s if target < horizon_s else 0.0)
        fail = failures[fi] if fi < len(failures) else math.inf
        if wall + seg_wall <= fail:
            wall += seg_wall
            pos = target
            if target < horizon_s:
                ck_time += cost_s
                last = target
            continue
        # interrupted inside this segment: the work since the last checkpoint is lost
        done = min(seg_work, fail - wall)
        lost_to = pos + max(0.0, done)
        redo += lost_to - last
        redo_v += _integral(w, last, lost_to)
        wall = fail + restart_s
        pos = last
        fi += 1
    return Overhead(ck_time, redo, redo_v)


def _integral(w: Callable[[float], float], a: float, b: float, n: int = 16) -> float:
    if b <= a:
        return 0.0
    h = (b - a) / n
    return h * (w(a) / 2 + sum(w(a + i * h) for i in range(1, n)) + w(b) / 2)


class CheckpointExplain(TypedDict, total=False):
    """``explain["checkpoint"]``: why the job is resumable and the suggested schedule (or why none)."""

    resumable: str | None
    error: str
    note: str
    checkpoints: int
    first_min: float | None
    last_gap_min: float | None
    even_interval_min: float
    rate_per_h: float
    rate_from: str


DEFAULT_RATE_PER_H = 0.01  # when neither the line nor the caller gives one: 1 per 100 job-hours (said)


def explain_checkpoint(
    harp_lines: Sequence[str],
    time_limit_s: float | None,
    signal_s: int | None = None,
    requeue: bool | None = None,
    rate_per_h: float | None = None,
) -> CheckpointExplain | None:
    """What --harp-explain says of a resumable job: why resumable, and the suggested schedule.

    Never raises: a wrong ``#HARP checkpoint`` line becomes the explanation's
    ``error`` (the job itself is not affected by it).
    """
    why = None
    try:
        why = resumable(harp_lines, signal_s, requeue)
        if why is None:
            return None
        tokens = checkpoint_tokens(list(harp_lines)) or {}
        if not tokens:
            return {"resumable": why}
        spec = spec_from_tokens(tokens)
    except DnnError as exc:
        return {"resumable": why, "error": str(exc)} if why else {"error": str(exc)}
    horizon = spec.horizon_s or time_limit_s
    if not horizon:
        return {"resumable": why, "note": "no horizon= and no time limit: no schedule"}
    rate = spec.rate_per_h or rate_per_h or DEFAULT_RATE_PER_H
    sched = coci_schedule(spec.cost_s, constant_hazard(rate), horizon, spec.converge, spec.t0_s)
    even = young_daly(spec.cost_s, rate)
    return {
        "resumable": why,
        "checkpoints": len(sched),
        "first_min": round(sched[0] / 60, 1) if sched else None,
        "last_gap_min": round((sched[-1] - sched[-2]) / 60, 1) if len(sched) > 1 else None,
        "even_interval_min": round(even / 60, 1),
        "rate_per_h": rate,
        "rate_from": "line" if spec.rate_per_h else ("site" if rate_per_h else "default 0.01/h"),
    }
