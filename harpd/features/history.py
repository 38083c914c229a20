"""Per-group run history and the feature vector of a job at submission time.

A job's best predictor is what the same user ran recently, the same program
in particular, and the very same request above all (users resubmit the same
script).  ``History`` keeps, for each such group, the last few finished runs
(used amount, the request it had, whether it was censored) and turns them into
numbers relative to the *current* request, so a model learns "how much of
what is asked will be used" rather than absolute sizes.

The same object serves three callers with one code path: the replay (walks a
trace and updates it as jobs finish), training (rebuilds it from the store)
and the daemon (kept in memory so a live prediction is a few dict look-ups).
Only jobs that have *finished* may enter it: a model must never see the
outcome of a job that was still running when the prediction was made.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

NAN = float("nan")
KEEP = 8  # runs the short-memory features look at
LONG = 32  # runs kept per group (the long-memory features: q90, max)
BURST_S = 3600.0  # time constant of the "submissions in the last hour" count

_PER_GROUP = ("n", "last", "mean2", "max5", "rmax5", "rmed", "cens", "rmin", "short", "age", "q90", "max")
GROUPS = ("u", "s", "r")  # user, user+signature, user+identical request
FEATURE_NAMES: tuple[str, ...] = (
    "log_ref",
    "log_cores",
    "log_array",
    "log_gap",
    "log_pending",
    "log_rel_req",
    "burst",
    "log_other",
    "gpus",
    "log_input",  # log1p of the input's bytes (harp-submit's stat of the files the job names; Nextflow's rchar)
    *(f"{g}_{k}" for g in GROUPS for k in _PER_GROUP),
)
N_FEATURES = len(FEATURE_NAMES)
#: column of the Tsafrir (mean of last two) and ALEA (max ratio of last five) estimates
COL = {name: i for i, name in enumerate(FEATURE_NAMES)}


@dataclass(slots=True)
class JobKeys:
    """How a job is grouped; built once per job by ``keys_of``."""

    user: str
    sig: str
    req: str
    ref: float  # the job's own request for the resource (1.0 when none: absolute)
    cores: float
    array: float
    other: float = NAN  # the request of the other resource (memory for time, time for memory)
    gpus: float = NAN
    input: float = NAN  # bytes of the job's input files, NAN when unknown


def keys_of(
    user: str | None,
    account: str | None,
    signature: str | None,
    job_name: str | None,
    ref: float | None,
    cores: float | None,
    array_size: int | None = None,
    other: float | None = None,
    gpus: float | None = None,
    input_bytes: float | None = None,
) -> JobKeys:
    """Grouping keys; an unknown user falls back to the account (Cedar has no users)."""
    who = user or (f"acct:{account}" if account else "?")
    sig = signature or (f"name:{job_name}" if job_name else None)
    r = ref if ref and ref > 0 else 1.0
    c = cores if cores and cores > 0 else 1.0
    o = float(other) if other and other > 0 else NAN
    gp = float(gpus) if gpus is not None and gpus >= 0 else NAN
    return JobKeys(
        user=who,
        sig=f"{who}\x1f{sig}" if sig else f"{who}\x1f~{c:g}",
        req=f"{who}\x1f{r:g}\x1f{c:g}\x1f{o:g}\x1f{gp:g}",
        ref=r,
        cores=c,
        array=float(array_size) if array_size else NAN,
        other=o,
        gpus=gp,
        input=float(input_bytes) if input_bytes is not None and input_bytes >= 0 else NAN,
    )


def key_fields(r, resource: str) -> tuple:
    """What grouping needs of a record, as a small tuple (training holds one per job).

    (user, account, signature, job_name, request, cores, array_size, other request, gpus, input bytes)
    """
    if resource == "time":
        ref, other = r.req_time_s, r.req_mem_mb
    else:
        ref, other = r.req_mem_mb, r.req_time_s
    gpus = r.req_gpus if r.req_gpus is not None else r.alloc_gpus
    return (
        r.user,
        r.account,
        r.signature,
        r.job_name,
        ref,
        r.req_cpus or r.alloc_cpus or 1,
        r.array_size,
        other,
        gpus,
        r.input_bytes,
    )


def keys_from_fields(f: tuple, relative: bool) -> JobKeys:
    return keys_of(f[0], f[1], f[2], f[3], f[4] if relative else None, f[5], f[6], f[7], f[8], f[9])


def keys_of_record(r, resource: str, relative: bool) -> JobKeys:
    """The keys of a finished JobRecord (or any object with its fields) for one resource.

    Training, replay and the daemon's history all group records through this
    one function, so a live job meets the groups its model was trained on.
    """
    return keys_from_fields(key_fields(r, resource), relative)


class _Runs:
    """The last KEEP runs of one group, newest last."""

    __slots__ = ("n", "used", "ratio", "cens", "reqs", "t_end")

    def __init__(self) -> None:
        self.n = 0
        self.used: list[float] = []
        self.ratio: list[float] = []
        self.cens: list[float] = []
        self.reqs: list[float] = []
        self.t_end: float | None = None

    def add(self, used: float, ratio: float, censored: bool, ref: float, t_end: float | None) -> None:
        self.n += 1
        self.used.append(used)
        self.ratio.append(ratio)
        self.cens.append(1.0 if censored else 0.0)
        self.reqs.append(ref)
        if t_end is not None:
            self.t_end = t_end
        if len(self.used) > 2 * LONG:
            del self.used[:-LONG], self.ratio[:-LONG], self.cens[:-LONG], self.reqs[:-LONG]


def _group_features(runs: _Runs | None, lref: float, now: float | None, out: list[float]) -> None:
    if runs is None or runs.n == 0:
        out += (0.0, NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN)
        return
    u = runs.used
    r = runs.ratio
    last5 = u[-5:]
    rr = [x for x in r[-5:] if not math.isnan(x)]
    rk = sorted(x for x in r[-KEEP:] if not math.isnan(x))
    c = runs.cens[-KEEP:]
    age = NAN
    if now is not None and runs.t_end is not None:
        age = math.log1p(max(now - runs.t_end, 0.0))
    lu = sorted(u[-LONG:])
    out += (
        math.log1p(runs.n),
        math.log(u[-1]) - lref,
        math.log(sum(u[-2:]) / len(u[-2:])) - lref,
        math.log(max(last5)) - lref,
        math.log(max(rr)) if rr else NAN,
        math.log(rk[len(rk) // 2]) if rk else NAN,
        sum(c) / len(c),
        math.log(rk[0]) if rk else NAN,
        (sum(1 for x in rk if x < 0.1) / len(rk)) if rk else NAN,
        age,
        math.log(lu[min(len(lu) - 1, int(0.9 * len(lu)))]) - lref,
        math.log(lu[-1]) - lref,
    )


class History:
    """Recent finished runs per user, per (user, signature), per (user, request)."""

    def __init__(self) -> None:
        self.groups: dict[str, _Runs] = {}
        self.last_submit: dict[str, float] = {}
        self.pending: dict[str, int] = {}
        self.burst: dict[str, tuple[float, float]] = {}  # user -> (decayed count, time)

    # -- outcomes -------------------------------------------------------------
    def add(
        self, keys: JobKeys, used: float, own_ref: float | None, censored: bool, t_end: float | None = None
    ) -> None:
        """Record a finished run. ``used`` is floored at 1 (log scale)."""
        used = max(float(used), 1.0)
        ratio = used / own_ref if own_ref and own_ref > 0 and keys.ref != 1.0 else NAN
        g = self.groups
        for k in (keys.user, keys.sig, keys.req):
            runs = g.get(k)
            if runs is None:
                runs = g[k] = _Runs()
            runs.add(used, ratio, censored, keys.ref, t_end)

    # -- submissions ----------------------------------------------------------
    def submitted(self, keys: JobKeys, now: float | None) -> None:
        """A job entered the queue (pending count and gap feature)."""
        self.pending[keys.user] = self.pending.get(keys.user, 0) + 1
        if now is not None:
            self.last_submit[keys.user] = now
            cnt, t = self.burst.get(keys.user, (0.0, now))
            self.burst[keys.user] = (cnt * math.exp(-max(now - t, 0.0) / BURST_S) + 1.0, now)

    def finished(self, keys: JobKeys) -> None:
        p = self.pending.get(keys.user, 0)
        if p > 0:
            self.pending[keys.user] = p - 1

    def count(self, keys: JobKeys, level: str = "s") -> int:
        """How many finished runs back this job's group (cold-start guard)."""
        k = {"u": keys.user, "s": keys.sig, "r": keys.req}[level]
        runs = self.groups.get(k)
        return runs.n if runs else 0

    def features(self, keys: JobKeys, now: float | None) -> list[float]:
        """The feature row of a job about to be submitted (see FEATURE_NAMES)."""
        lref = math.log(keys.ref)
        last = self.last_submit.get(keys.user)
        gap = math.log1p(max(now - last, 0.0)) if (now is not None and last is not None) else NAN
        g = self.groups
        ur = g.get(keys.user)
        rel = NAN
        if ur is not None and ur.reqs:
            rs = sorted(ur.reqs[-KEEP:])
            rel = lref - math.log(rs[len(rs) // 2])
        burst = 0.0
        b = self.burst.get(keys.user)
        if b is not None and now is not None:
            burst = math.log1p(b[0] * math.exp(-max(now - b[1], 0.0) / BURST_S))
        out = [
            lref,
            math.log(keys.cores),
            math.log1p(keys.array) if keys.array == keys.array else NAN,
            gap,
            math.log1p(self.pending.get(keys.user, 0)),
            rel,
            burst,
            math.log(keys.other) if keys.other == keys.other else NAN,
            keys.gpus,
            math.log1p(keys.input) if keys.input == keys.input else NAN,
        ]
        _group_features(ur, lref, now, out)
        _group_features(g.get(keys.sig), lref, now, out)
        _group_features(g.get(keys.req), lref, now, out)
        return out


def conformal_group(partition: str | None, log_pending: float) -> str:
    """The calibration group of a job: how many of its user's jobs are unfinished, and where.

    Jobs submitted in a burst share one unknown: if the first is mis-sized,
    all of them are, and no outcome arrives in time to correct the rest.
    Calibrating bursts apart gives them the wider bounds their correlated
    errors need, without widening every other job's.
    """
    p = math.expm1(log_pending) if not math.isnan(log_pending) else 0.0
    b = "p0" if p < 1.5 else "p1" if p < 9.5 else "p2" if p < 99.5 else "p3"
    return f"{b}|{partition or '?'}"
