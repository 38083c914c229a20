"""The time and cost goals of a ``#HARP dnn`` line: deadline, work, search, batch range.

The memory keys (``spec.py``) say what must fit on a GPU; these say what the
user wants of the run: finish by a deadline (RubberBand), run a successive-
halving search with a plan per stage, or let harp choose the batch within a
range (elastic scaling).  They are parsed here, apart from the memory spec, so
a job without them is planned by the memory spec alone.

Every value is bounded (a deadline of at most a year, at most 100,000 trials,
a batch range within 1..10^7, at most 32 earlier runs) so that hostile input
can neither raise a traceback nor make planning slow; anything wrong is a
``DnnError`` of one line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from harpd.dnn.errors import DnnError
from harpd.dnn.spec import parse_count

MAX_DEADLINE_S = 366 * 86400
MAX_TRIALS = 100_000
MAX_BATCH = 10**7
MAX_RUNS = 32
DEFAULT_ETA = 3
DEFAULT_MFU = 0.40

_DURATION = re.compile(r"^([0-9]+(?:\.[0-9]+)?)\s*([smhd]|min|mins|hr|hrs|days?)?$", re.IGNORECASE)
_UNIT_S = {
    "s": 1,
    "m": 60,
    "min": 60,
    "mins": 60,
    "h": 3600,
    "hr": 3600,
    "hrs": 3600,
    "d": 86400,
    "day": 86400,
    "days": 86400,
}


@dataclass(frozen=True)
class RunTime:
    """One earlier run of the same job: how long it took on how many GPUs (of which type)."""

    n_gpus: int
    elapsed_s: float
    gpu_type: str | None = None
    nodes: int = 1


@dataclass(frozen=True)
class DnnGoals:
    deadline_s: float | None = None
    tokens: float | None = None
    mfu: float = DEFAULT_MFU
    trials: int | None = None
    eta: int = DEFAULT_ETA
    stage: int = 0
    batch: tuple[int, int] | None = None  # global batch (sequences), inclusive range
    runs: tuple[RunTime, ...] = ()

    @property
    def any(self) -> bool:
        return self.deadline_s is not None or self.batch is not None or self.trials is not None


def parse_duration(key: str, value: str) -> float:
    """8h, 90m, 2d, 3600, 1:30:00, 2-00:00:00 -> seconds (a bare number is minutes, as sbatch's)."""
    v = value.strip().lower()
    m = _DURATION.match(v)
    seconds: float | None = None
    if m:
        unit = m.group(2)
        seconds = float(m.group(1)) * (_UNIT_S[unit] if unit else 60)
    elif re.fullmatch(r"(?:[0-9]+-)?[0-9]+(?::[0-9]+){1,2}", v):
        days = 0
        if "-" in v:
            d, v = v.split("-", 1)
            days = int(d)
        parts = [int(p) for p in v.split(":")]
        if len(parts) == 2:  # MM:SS as sbatch reads it, HH:MM with days
            h, mi, s = (parts[0], parts[1], 0) if days else (0, parts[0], parts[1])
        else:
            h, mi, s = parts
        seconds = days * 86400 + h * 3600 + mi * 60 + s
    if seconds is None:
        raise DnnError(f"#HARP dnn: {key}={value} is not a duration (e.g. {key}=8h, 90m, 2d or 1:30:00)")
    if not 60 <= seconds <= MAX_DEADLINE_S:
        raise DnnError(f"#HARP dnn: {key}={value} is out of range (1 minute to 366 days)")
    return seconds


def parse_batch(value: str) -> tuple[int, int]:
    """``256..2048`` (or ``256-2048``, or one number) -> (lo, hi), both in 1..10^7."""
    v = value.strip()
    parts = re.split(r"\.\.|-|:", v)
    if len(parts) == 1:
        parts = [parts[0], parts[0]]
    if len(parts) != 2 or not all(parts):
        raise DnnError(f"#HARP dnn: batch={value} is not a range (e.g. batch=256..2048)")
    lo = parse_count("batch", parts[0], lo=1, hi=MAX_BATCH)
    hi = parse_count("batch", parts[1], lo=1, hi=MAX_BATCH)
    if lo > hi:
        raise DnnError(f"#HARP dnn: batch={value}: the low end is above the high end (write batch={hi}..{lo})")
    return lo, hi


def parse_runs(value: str) -> tuple[RunTime, ...]:
    """``1:10h,4xa100:3h,16xa100x2n:50m`` -> RunTime records (GPUs, optional type and nodes)."""
    out = []
    items = [i for i in value.split(",") if i.strip()]
    if len(items) > MAX_RUNS:
        raise DnnError(f"#HARP dnn: runs= lists {len(items)} runs; at most {MAX_RUNS}")
    for item in items:
        what, sep, dur = item.strip().partition(":")
        m = re.fullmatch(r"([0-9]+)(?:x([A-Za-z][\w.-]*?))?(?:x([0-9]+)n)?", what.strip())
        if not sep or not m:
            raise DnnError(
                f"#HARP dnn: runs item '{item.strip()}' is not GPUS[xTYPE][xNODESn]:ELAPSED (e.g. runs=1:10h,4xa100:3h)"
            )
        n = parse_count("runs", m.group(1), lo=1, hi=100_000)
        nodes = int(m.group(3)) if m.group(3) else 1
        if not 1 <= nodes <= n:
            raise DnnError(f"#HARP dnn: runs item '{item.strip()}': nodes must be 1 to the GPU count")
        out.append(RunTime(n, parse_duration("runs", dur), m.group(2), nodes))
    return tuple(out)


def goals_from_tokens(tokens: dict[str, str]) -> DnnGoals:
    """The goal keys of a parsed ``#HARP dnn`` line (the other keys are ``spec.py``'s)."""
    kw: dict = {}
    if "deadline" in tokens:
        kw["deadline_s"] = parse_duration("deadline", tokens["deadline"])
    if "tokens" in tokens:
        kw["tokens"] = float(parse_count("tokens", tokens["tokens"], hi=10**16))
    if "mfu" in tokens:
        try:
            mfu = float(tokens["mfu"])
        except ValueError:
            raise DnnError(f"#HARP dnn: mfu={tokens['mfu']} is not a number (e.g. mfu=0.4)") from None
        if not 0.01 <= mfu <= 1.0:
            raise DnnError(f"#HARP dnn: mfu={tokens['mfu']} is out of range (0.01 to 1)")
        kw["mfu"] = mfu
    if "trials" in tokens:
        kw["trials"] = parse_count("trials", tokens["trials"], lo=1, hi=MAX_TRIALS)
    if "eta" in tokens:
        kw["eta"] = parse_count("eta", tokens["eta"], lo=2, hi=100)
    if "stage" in tokens:
        kw["stage"] = parse_count("stage", tokens["stage"], lo=0, hi=64)
    if "batch" in tokens:
        kw["batch"] = parse_batch(tokens["batch"])
    if "runs" in tokens:
        kw["runs"] = parse_runs(tokens["runs"])
    goals = DnnGoals(**kw)
    if (goals.deadline_s is not None or goals.trials is not None) and goals.tokens is None and not goals.runs:
        raise DnnError(
            "#HARP dnn: a deadline or a search needs the work: tokens= (training tokens of one run) "
            "or runs= (earlier runs, e.g. runs=1:10h,4:3h)"
        )
    if goals.trials is not None and goals.tokens is None:
        raise DnnError("#HARP dnn: trials= needs tokens= (one trial's full training) to size each stage")
    if goals.trials is None and "stage" in tokens:
        raise DnnError("#HARP dnn: stage= belongs to a search: give trials= too")
    return goals
