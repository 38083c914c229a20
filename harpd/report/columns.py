"""The job columns a report reads, as typed numpy arrays.

The report aggregates a million jobs in seconds only if it never builds a
Python object per job: everything works on one array per column.  This module
fixes the dtypes once (NaN for unknown numbers, ``None`` for unknown strings)
so the store's raw columns and hand-built test records look alike to
``aggregate``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from harpd.records import JobRecord

Jobs = dict[str, np.ndarray]

STRING_COLUMNS = ("job_id", "user", "account", "partition", "signature", "outcome")
FLOAT_COLUMNS = (
    "end_time",
    "req_time_s",
    "req_mem_mb",
    "req_cpus",
    "req_gpus",
    "alloc_cpus",
    "alloc_gpus",
    "used_time_s",
    "used_mem_mb",
    "used_cpu_s",
)
BOOL_COLUMNS = ("harp_sized",)
INT_COLUMNS = ("attempt",)
GROUP_KEYS = ("user", "account", "partition", "signature")


def columns_for(by: str) -> list[str]:
    """The store columns a report grouped ``by`` needs: every column read costs
    about a quarter of a second per million jobs, so the other keys stay on disk
    (user scoping happens in SQL)."""
    strings = [c for c in STRING_COLUMNS if c not in GROUP_KEYS or c == by]
    if by == "signature":  # a signature is a hash: its rows are labelled by the program's job name
        strings.append("job_name")
    return strings + list(FLOAT_COLUMNS) + list(BOOL_COLUMNS) + list(INT_COLUMNS)


def _as_float(values: Any) -> np.ndarray:
    arr = np.asarray(values)
    if arr.dtype == np.float64:
        return arr
    return arr.astype(np.float64)  # object arrays: None -> nan


def _as_bool(values: Any) -> np.ndarray:
    arr = np.asarray(values)
    if arr.dtype == np.bool_:
        return arr
    if arr.dtype == object:
        arr = np.array([bool(v) for v in arr.tolist()], dtype=np.bool_)
        return arr
    return arr.astype(np.bool_)


def _as_int(values: Any, default: int) -> np.ndarray:
    arr = np.asarray(values)
    if arr.dtype.kind in "iu":
        return arr.astype(np.int64, copy=False)
    f = arr.astype(np.float64)
    return np.where(np.isnan(f), default, f).astype(np.int64)


def _as_str(values: Any) -> np.ndarray:
    arr = np.asarray(values, dtype=object)
    return arr


def normalise(raw: Mapping[str, Any]) -> Jobs:
    """Typed copies of whatever columns ``raw`` holds (the store's or a test's)."""
    out: Jobs = {}
    for name, values in raw.items():
        if name in FLOAT_COLUMNS:
            out[name] = _as_float(values)
        elif name in BOOL_COLUMNS:
            out[name] = _as_bool(values)
        elif name in INT_COLUMNS:
            out[name] = _as_int(values, 1)
        else:
            out[name] = _as_str(values)
    n = {len(v) for v in out.values()}
    if len(n) > 1:
        raise ValueError(f"job columns of different lengths: {sorted(n)}")
    return out


def from_records(records: Iterable[JobRecord], columns: Iterable[str] | None = None) -> Jobs:
    """Arrays from records: what tests use, and the fallback for small stores."""
    recs = list(records)
    names = list(columns) if columns is not None else columns_for("user") + ["account", "partition", "signature"]
    raw: dict[str, list[Any]] = {}
    for name in dict.fromkeys(names):
        if name == "outcome":
            raw[name] = [r.outcome.value for r in recs]
        else:
            raw[name] = [getattr(r, name) for r in recs]
    return normalise(raw)


def size(jobs: Jobs) -> int:
    for v in jobs.values():
        return len(v)
    return 0


def factorize(values: np.ndarray, missing: str = "(none)") -> tuple[np.ndarray, list[str]]:
    """Integer codes and labels for a string column (``None`` -> ``missing``).

    A dict pass is faster than ``np.unique`` on object arrays (no sort of
    Python strings) and keeps first-seen order; callers sort what they show.
    """
    index: dict[Any, int] = {}
    codes = np.fromiter(
        (index.setdefault(v or None, len(index)) for v in values.tolist()), dtype=np.int64, count=len(values)
    )
    labels = [missing if k is None else str(k) for k in index]
    return codes, labels
