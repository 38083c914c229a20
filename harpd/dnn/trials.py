"""Convergence-aware trials (Hermes) in Slurm terms: which pending trials get which nice, which are stopped.

Hermes (Son et al., Electronics 2021) schedules the trials of hyper-parameter
searches by how fast they converge: good hyper-parameter combinations converge
quickly early, so trials of fast-converging searches get the GPUs first.
Hermes time-shares GPUs and preempts running containers; a Slurm site's
daemon cannot, so harp's rule acts only where Slurm lets an owner act on
their own jobs:

* **nice of pending trials.**  The studies (searches) of one owner are ranked
  by how fast their trials converge (median over the study's trials of the
  relative metric improvement per hour between a trial's first and last
  report).  The fastest study's pending trials get nice 0, the slowest
  ``max_nice``, the others in between by rank.  Only non-negative nice, and
  only among one owner's studies: a user can raise the nice of their own jobs
  themselves, so harp never lifts a user above other users, and one user's
  fast search never pushes another user's trials back.
* **successive halving** (``stop=sha``, opt-in per study; asynchronous, as
  ASHA): rungs at ``rung_s * eta**k`` seconds of a trial's run time; at each
  rung that at least ``eta`` trials have reached, a trial not among the best
  ``1/eta`` of them (by its best value up to the rung) is stopped: a running
  one cancelled, a pending (requeued) one held.

Pure: no Slurm, no store.  The watch step gathers the reports and the trials
Slurm lists, calls :func:`decide_trials`, and applies what it returns.
"""

from __future__ import annotations

import math
import re
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from harpd.dnn.errors import DnnError

STOP_RULES = ("none", "sha")
MAX_NICE = 10_000


@dataclass(frozen=True)
class ProgressReport:
    """One ``harp progress --metric loss=0.31`` of a running trial, at ``elapsed_s`` of its run."""

    job_id: str
    study: str
    metric: str
    value: float
    elapsed_s: float


@dataclass(frozen=True)
class Trial:
    """A trial job Slurm lists: its id, study, owner (Slurm's uid), state and current nice."""

    job_id: str
    study: str
    uid: int
    state: str  # PENDING, RUNNING (others are left alone)
    nice: int = 0


@dataclass(frozen=True)
class StudyPolicy:
    """How a study is judged: ``#HARP study=NAME metric=loss mode=min stop=sha eta=3 rung=30m``."""

    study: str
    metric: str = "loss"
    lower_is_better: bool = True
    stop: str = "none"
    eta: int = 3
    rung_s: float = 1800.0


@dataclass(frozen=True)
class TrialAction:
    """What harpd does to one trial: a new nice (pending), or stop (cancel if running, hold if pending)."""

    job_id: str
    study: str
    nice: int | None
    stop: bool
    reason: str


def _rung_s(text: str) -> float:
    """``30m``, ``2h``, ``45s``, ``1d`` or minutes (as sbatch's bare numbers) as seconds."""
    m = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)([smhd]?)", text.strip().lower())
    if not m:
        raise DnnError(f"#HARP study: rung={text} is not a duration (like 30m, 2h, 45s)")
    return float(m.group(1)) * {"s": 1, "": 60, "m": 60, "h": 3600, "d": 86400}[m.group(2)]


def parse_study(tokens: Sequence[str]) -> StudyPolicy:
    """A ``#HARP study=NAME ...`` line's tokens as a policy; one clear error for a bad key or value."""
    fields: dict[str, str] = {}
    for tok in tokens:
        key, sep, value = tok.partition("=")
        if not sep or not value:
            raise DnnError(f"#HARP study: '{tok}' is not key=value (keys: study metric mode stop eta rung)")
        if key in fields and fields[key] != value:
            raise DnnError(f"#HARP study: {key} given twice ({fields[key]}, {value})")
        fields[key] = value
    unknown = set(fields) - {"study", "metric", "mode", "stop", "eta", "rung"}
    if unknown:
        raise DnnError(f"#HARP study: unknown key {sorted(unknown)[0]} (keys: study metric mode stop eta rung)")
    name = fields.get("study", "")
    if not name or len(name) > 64 or not all(c.isalnum() or c in "-_." for c in name):
        raise DnnError("#HARP study: study=NAME is needed (letters, digits, - _ ., at most 64)")
    mode = fields.get("mode", "min")
    if mode not in ("min", "max"):
        raise DnnError(f"#HARP study: mode={mode} is not min or max")
    stop = fields.get("stop", "none")
    if stop not in STOP_RULES:
        raise DnnError(f"#HARP study: stop={stop} is not one of {', '.join(STOP_RULES)}")
    try:
        eta = int(fields.get("eta", "3"))
    except ValueError:
        raise DnnError(f"#HARP study: eta={fields['eta']} is not a whole number") from None
    if not 2 <= eta <= 16:
        raise DnnError(f"#HARP study: eta={eta} is out of range (2 to 16)")
    rung_s = _rung_s(fields["rung"]) if "rung" in fields else 1800.0
    if not 1 <= rung_s <= 30 * 86400:
        raise DnnError(f"#HARP study: rung={fields['rung']} is out of range (1 second to 30 days)")
    metric = fields.get("metric", "loss")
    if not metric.replace("_", "").isalnum() or len(metric) > 32:
        raise DnnError(f"#HARP study: metric={metric} is not a plain name")
    return StudyPolicy(name, metric, mode == "min", stop, eta, rung_s)


def parse_metric(text: str) -> tuple[str, float]:
    """``loss=0.31`` as (name, value); one clear line for anything else."""
    name, sep, value = text.partition("=")
    if not sep or not name or not name.replace("_", "").isalnum() or len(name) > 32:
        raise DnnError(f"--metric {text}: give NAME=VALUE, e.g. --metric loss=0.31")
    try:
        v = float(value)
    except ValueError:
        raise DnnError(f"--metric {text}: {value} is not a number") from None
    if not math.isfinite(v):
        raise DnnError(f"--metric {text}: the value must be finite")
    return name, v


def trial_rate(reports: Sequence[ProgressReport], lower_is_better: bool = True) -> float | None:
    """Relative improvement per hour between a trial's first and last report (None before two reports).

    Relative, so loss and accuracy of different scales compare; per hour of the
    trial's own run time, so a trial reporting often does not count more.
    """
    rs = sorted(reports, key=lambda r: r.elapsed_s)
    if len(rs) < 2 or rs[-1].elapsed_s <= rs[0].elapsed_s:
        return None
    first, last = rs[0].value, rs[-1].value
    gain = (first - last) if lower_is_better else (last - first)
    return gain / max(abs(first), 1e-12) / ((rs[-1].elapsed_s - rs[0].elapsed_s) / 3600.0)


def study_rates(reports: Iterable[ProgressReport], policies: dict[str, StudyPolicy]) -> dict[str, float]:
    """Each study's convergence speed: the median of its trials' rates (studies without one left out)."""
    by_trial: dict[tuple[str, str], list[ProgressReport]] = defaultdict(list)
    for r in reports:
        pol = policies.get(r.study, StudyPolicy(r.study))
        if r.metric == pol.metric:
            by_trial[(r.study, r.job_id)].append(r)
    per_study: dict[str, list[float]] = defaultdict(list)
    for (study, _), rs in by_trial.items():
        rate = trial_rate(rs, policies.get(study, StudyPolicy(study)).lower_is_better)
        if rate is not None:
            per_study[study].append(rate)
    return {s: statistics.median(v) for s, v in per_study.items()}


def _value_at(reports: Sequence[ProgressReport], t: float, lower: bool) -> float | None:
    vals = [r.value for r in reports if r.elapsed_s <= t]
    if not vals:
        return None
    return min(vals) if lower else max(vals)


def sha_stops(reports: Iterable[ProgressReport], policy: StudyPolicy, live: set[str]) -> dict[str, str]:
    """Trials (of ``live`` ones) asynchronous successive halving stops, with the rung and cut-off as reason."""
    by_trial: dict[str, list[ProgressReport]] = defaultdict(list)
    for r in reports:
        if r.study == policy.study and r.metric == policy.metric:
            by_trial[r.job_id].append(r)
    stops: dict[str, str] = {}
    if not by_trial:
        return stops
    longest = max(r.elapsed_s for rs in by_trial.values() for r in rs)
    k = 0
    while (rung := policy.rung_s * policy.eta**k) <= longest:
        reached = {
            j: _value_at(rs, rung, policy.lower_is_better)
            for j, rs in by_trial.items()
            if max(r.elapsed_s for r in rs) >= rung
        }
        scored = sorted(
            ((v, j) for j, v in reached.items() if v is not None),
            key=lambda p: p[0] if policy.lower_is_better else -p[0],
        )
        if len(scored) >= policy.eta:
            keep = max(1, len(scored) // policy.eta)
            cutoff = scored[keep - 1][0]
            for v, j in scored[keep:]:
                if v == cutoff:
                    continue  # a tie with the last kept trial is not worse: stopping it would be a coin toss
                if j in live and j not in stops:
                    stops[j] = (
                        f"successive halving (eta={policy.eta}): at rung {rung / 60:.0f} min "
                        f"{policy.metric}={v:g} is not among the best {keep} of {len(scored)} "
                        f"(cut-off {cutoff:g})"
                    )
        k += 1
    return stops


def decide_trials(
    trials: Sequence[Trial], reports: Sequence[ProgressReport], policies: dict[str, StudyPolicy], max_nice: int = 1000
) -> list[TrialAction]:
    """The nice of each pending trial and the trials to stop; only actions that change something.

    Studies are ranked per owner (Slurm's uid of the trials): the fastest
    converging study of an owner gets nice 0, the slowest ``max_nice``.  A
    study with no rate yet (fewer than two reports of any trial) keeps its nice.
    """
    if not 0 <= max_nice <= MAX_NICE:
        raise DnnError(f"trials: max_nice={max_nice} is out of range (0 to {MAX_NICE})")
    rates = study_rates(reports, policies)
    owners: dict[int, set[str]] = defaultdict(set)
    for t in trials:
        if t.study in rates:
            owners[t.uid].add(t.study)
    nice_of: dict[tuple[int, str], tuple[int, str]] = {}
    for uid, studies in owners.items():
        ranked = sorted(studies, key=lambda s: (-rates[s], s))
        n = len(ranked)
        for i, s in enumerate(ranked):
            nice = 0 if n == 1 else round(max_nice * i / (n - 1))
            nice_of[(uid, s)] = (
                nice,
                f"study {s} converges at {rates[s]:.3g}/h, rank {i + 1} of {n} of this owner's studies",
            )
    live = {t.job_id for t in trials if t.state in ("PENDING", "RUNNING")}
    stops: dict[str, str] = {}
    for pol in policies.values():
        if pol.stop == "sha":
            stops.update(sha_stops(reports, pol, live))
    actions = []
    for t in sorted(trials, key=lambda t: t.job_id):
        if t.state not in ("PENDING", "RUNNING"):
            continue
        if t.job_id in stops:
            actions.append(TrialAction(t.job_id, t.study, None, True, stops[t.job_id]))
            continue
        got = nice_of.get((t.uid, t.study))
        if t.state == "PENDING" and got is not None and got[0] != t.nice:
            actions.append(TrialAction(t.job_id, t.study, got[0], False, got[1]))
    return actions
