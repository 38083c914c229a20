"""The last queue simulation's figures, saved as a JSON file beside the store.

``harp replay --schedule`` runs on an admin's machine from a trace file and
never opens the store; ``harp report --format html`` reads the store.  The
queue panel of the report needs the replay's figures, so the replay leaves
them in a small JSON file next to the store database (``harp.db`` →
``harp.queue.json``) and the report reads it when present.  A file rather than
a store table: the figures describe a simulation, not jobs, they are replaced
whole by the next run, and neither command then has to know the other's
schema (only this module's two functions).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TypedDict, cast

SUFFIX = ".queue.json"


class QueuePolicy(TypedDict, total=False):
    """One simulated policy's figures: ``harpd.simulate.schedule.Summary``'s, averaged over the copies.

    ``*_se`` the standard errors and ``*_copies`` the per-copy values of the
    paired figures (``harpd.simulate.shake.mean_row``); ``seconds`` the
    simulation's time per policy, ``harp_kills`` the kills harp's limits add.
    """

    policy: str
    procs: int
    jobs: int
    rejected: int
    mean_wait_s: float | None
    p95_wait_s: float | None
    mean_bounded_slowdown: float | None
    utilization: float | None
    useful_utilization: float | None
    makespan_s: float | None
    kills: int
    extensions: int
    abandoned: int
    delayed_by_extension: int
    delayed_by_kill: int
    delayed_starts: int
    mean_wait_s_se: float | None
    mean_bounded_slowdown_se: float | None
    mean_wait_s_copies: list[float | None]
    mean_bounded_slowdown_copies: list[float | None]
    replicas: int
    seconds: float
    harp_kills: int


class PairedFigure(TypedDict, total=False):
    """A policy against the users' requests on one figure, copy by copy (``harpd.simulate.shake.paired``)."""

    rel_diff: float | None
    se: float | None
    verdict: str  # "lower", "higher", "no clear difference", "one copy" or "no jobs"
    copies: int
    higher_copies: int
    lower_copies: int


class GapSize(TypedDict):
    """The users→exact gap of one figure: its mean over the copies and standard error (None: one copy)."""

    gap: float | None
    se: float | None


class QueueFigures(TypedDict, total=False):
    """``harp replay --schedule``'s figures (``harpd.evaluate.schedule_simulation.schedule``), as saved.

    Every key is optional to a reader: the file is another run's, maybe an older harp's.
    """

    procs: int
    jobs: int
    replicas: int
    shake_s: float
    compress: float
    soft_loop: str | None
    queue_rule: bool
    policies: list[QueuePolicy]
    gap_closed: dict[str, dict[str, float | None]]  # harp row -> figure -> share of the users→exact gap
    gap: dict[str, GapSize]  # figure -> the gap
    vs_users: dict[str, dict[str, PairedFigure]]  # policy -> figure -> its comparison
    notes: list[str]
    trace: str


def path_beside(store_path: str | os.PathLike[str]) -> Path:
    """Where the queue figures of the store at ``store_path`` live."""
    p = Path(store_path)
    return p.with_name(p.stem + SUFFIX)


def save(path: str | os.PathLike[str], summary: QueueFigures) -> None:
    """Write ``summary`` atomically (a reader never sees half a file); OSError if the folder is not writable."""
    target = Path(path)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(summary, indent=1, allow_nan=False), encoding="utf-8")
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def load(path: str | os.PathLike[str]) -> QueueFigures | None:
    """The saved figures, or None when there are none (or the file is unreadable: the panel is optional)."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return None
    if not (isinstance(data, dict) and isinstance(data.get("policies"), list)):
        return None
    return cast(QueueFigures, data)  # a JSON object with policies: its readers .get() each key
