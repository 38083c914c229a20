"""One decision path: the replay's harp row is what a running harpd answers, job by job.

A small workflow trace is replayed (``run_chronological``), then handed to a
live predictor the way harpd gets it: each finished task stored in SQLite,
read back from the store by the predictor's load (``load_history``, what
harpd reads at start and reload; not ``learn``, the replay's hand-over), and
every task asked ``decide`` at its submission.  The first
allocations must be the same, task by task, and harp must have cut some.
"""

from __future__ import annotations

import math
import random

import pytest

from harp_submit.units import parse_mem
from harpd.config import HarpSettings
from harpd.evaluate.workflow_replay import MIB, LiveHarp, Task, run_chronological
from harpd.predict.live import ModelPredictor
from harpd.store import Store

GB = 1024.0 * MIB


def _trace(seed: int = 7) -> list[Task]:
    """Five task types submitted in waves; each uses a share of its request that differs per type."""
    rng = random.Random(seed)
    tasks: list[Task] = []
    t = 1_700_000_000.0
    for k in range(5):
        share, req = 0.15 + 0.12 * k, (2 + k) * GB
        for _ in range(12):
            x = rng.uniform(1e8, 1e9)
            use = req * share * (0.6 + 0.4 * x / 1e9)
            run = rng.uniform(300, 900)
            sub = t + rng.uniform(0, 4000)
            tasks.append(
                Task(
                    process=f"P{k}",
                    input_bytes=x,
                    usage=use,
                    peak=use,
                    runtime_s=run,
                    request=req,
                    submit=sub,
                    start=sub,
                    end=sub + run,
                )
            )
        t += 1500.0
    return tasks


def _store_decisions(tmp_path, tasks: list[Task]) -> list[float | None]:
    settings = HarpSettings(store={"path": str(tmp_path / "harp.db")})
    store = Store.open(settings.store.path)
    try:
        harpd = ModelPredictor.history_only(settings, store=store, resources=("mem",))
        convert = LiveHarp(settings)  # only its spelling of a job request and of a stored outcome
        ended = sorted(tasks, key=lambda x: x.end)
        e, out = 0, []
        for task in sorted(tasks, key=lambda x: x.submit):
            batch = []
            while e < len(ended) and ended[e].end <= task.submit:
                batch.append(convert.record(ended[e].process, ended[e]))
                e += 1
            if batch:
                store.insert_jobs(batch)
                harpd.load_history()
            d = harpd.decide(convert.job(task.process, task.input_bytes, task.request), "replay", 0, now=task.submit)
            mem = [c for c in d.changes if c.option == "mem"]
            out.append(float(parse_mem(mem[0].value)) * MIB if mem else None)
        return out
    finally:
        store.close()


def test_replay_decisions_are_harpds_through_the_store(tmp_path):
    tasks = _trace()
    res = run_chronological(tasks, at="submit")
    live = _store_decisions(tmp_path, tasks)
    assert len(res.harp_first) == len(tasks) == len(live)
    assert res.harp_first == live
    cut = [(f, t) for f, t in zip(live, sorted(tasks, key=lambda x: x.submit)) if f is not None]
    assert len(cut) >= len(tasks) // 3  # harp sized many of them (own runs, or the prior over types)
    assert all(f < t.request for f, t in cut)


def test_a_first_type_with_no_run_keeps_its_request_until_types_calibrate(tmp_path):
    tasks = [t for t in _trace() if t.process == "P0"]
    res = run_chronological(tasks, at="submit")
    first_wave = [
        f
        for f, t in zip(res.harp_first, sorted(tasks, key=lambda x: x.submit))
        if not any(o.end <= t.submit for o in tasks)
    ]
    assert first_wave and all(f is None for f in first_wave)  # no other type: no prior, the request stands
    assert not math.isnan(res.rows["harp"].wastage_gbh)


@pytest.mark.parametrize("at", ["start", "submit"])
def test_harp_row_counts_failures_and_their_allocation(at):
    res = run_chronological(_trace(3), at=at)
    w = res.rows["harp"]
    assert w.tasks == 60 and w.failures >= 0
    assert w.under_gbh >= 0.0 and (w.failures == 0) == (w.under_gbh == 0.0)
