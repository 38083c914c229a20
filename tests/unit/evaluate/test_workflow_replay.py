"""Workflow task memory under Sizey's metric (harpd.evaluate.workflow_replay and its parts), on synthetic traces."""

from __future__ import annotations

import dataclasses
import json
import random

import numpy as np
import pytest

from harpd.cli.main import main as harp
from harpd.evaluate.sizey_metric import GBH, Wastage
from harpd.evaluate.workflow_baselines import NODE_BYTES, Tovar, WittPercentile
from harpd.evaluate.workflow_replay import (
    MIN_TYPE_ROWS,
    Task,
    WorkflowReplayError,
    replay_workflow,
    run_chronological,
    sizey_split,
)
from harpd.predict.workflow_harp import HarpTaskModel, escalated_cost
from harpd.records import Outcome
from harpd.recovery.escalation import simulate

HEAD = [
    "task_id",
    "process",
    "name",
    "status",
    "exit",
    "attempt",
    "cpus",
    "memory",
    "time",
    "realtime",
    "%cpu",
    "peak_rss",
    "rss",
    "rchar",
    "submit",
    "start",
    "complete",
]
GB = 1e9


def synthetic_trace(path, types: int = 3, per_type: int = 60, seed: int = 3, noise: float = 0.05):
    """A raw-unit CSV Nextflow trace whose memory grows with rchar, per process; users ask 8 GB."""
    rnd = random.Random(seed)
    rows, t = [], 1_700_000_000_000
    for k in range(per_type):
        for p in range(types):
            rchar = rnd.uniform(0.2, 5) * GB
            peak = (0.1 + 0.3 * (p + 1) * rchar / GB) * GB * (1 + rnd.uniform(-noise, noise))
            run_ms = rnd.randint(60_000, 600_000)
            rows.append(
                [
                    str(len(rows) + 1),
                    f"WF:STEP{p}",
                    f"WF:STEP{p} ({k})",
                    "COMPLETED",
                    "0",
                    "1",
                    "2",
                    str(int(8 * GB)),
                    "3600000",
                    str(run_ms),
                    "95.0",
                    str(int(peak)),
                    str(int(peak * 0.9)),
                    str(int(rchar)),
                    str(t),
                    str(t + 1000),
                    str(t + 1000 + run_ms),
                ]
            )
            t += 700_000  # the previous task has finished before the next is submitted
    path.write_text("\n".join(",".join(r) for r in [HEAD, *rows]) + "\n")
    return path


def _task(proc="P", x=1.0, usage=1.0, runtime=10.0, request=8.0, submit=0.0, end=10.0) -> Task:
    return Task(proc, x, usage, usage, runtime, request, submit, end)


def test_wastage_follows_the_definition():
    w = Wastage()
    allocs, y, t = [1e9, 2e9, 4e9], 3e9, 7200.0
    w.add(allocs, y, t)
    assert w.failures == 2
    assert w.under_gbh == pytest.approx((allocs[0] + allocs[1]) * t / GBH)
    assert w.over_gbh == pytest.approx((allocs[-1] - y) * t / GBH)
    with pytest.raises(ValueError):
        w.add([1e9], 2e9, 1.0)


def test_vectorised_cost_is_the_escalation_rule():
    rnd = np.random.default_rng(0)
    y = rnd.uniform(1, 100, 200)
    first = rnd.uniform(0.5, 120, 200)
    req = np.where(rnd.random(200) < 0.5, rnd.uniform(1, 150, 200), np.nan)
    t = rnd.uniform(1, 10, 200)
    got = escalated_cost(first, y, t, req)
    for i in range(200):
        ch = simulate(y[i], first[i], None if np.isnan(req[i]) else req[i], None, Outcome.OOM, max_attempts=3)
        allocs = list(ch.allocations)
        while allocs[-1] < y[i]:  # past harpd's attempts: the user's own retries double
            allocs.append(2.0 * allocs[-1])
        ch = dataclasses.replace(ch, allocations=tuple(allocs))
        want = (sum(ch.allocations[:-1]) + ch.allocations[-1] - y[i]) * t[i]
        assert got[i] == pytest.approx(want)


def test_baselines_first_and_retry():
    w = WittPercentile()
    ys = np.arange(1.0, 101.0)
    w.fit(ys, ys, np.ones(100))
    assert w.first(0, 0) == pytest.approx(np.percentile(ys, 95)) and w.retry(3.0) == 6.0
    tv = Tovar()
    tv.fit(ys, ys, np.ones(100))
    assert tv.first(0, 0) in ys and tv.retry(5.0) == 100.0 and tv.retry(100.0) >= NODE_BYTES


def test_harp_model_follows_input_size():
    m = HarpTaskModel()
    x = np.linspace(1, 10, 40)
    m.fit(x, 3 * x + 1, np.ones(40))
    small, big = m.first(2.0, 100.0), m.first(9.0, 100.0)
    assert small >= 7.0 * 0.95 and big >= 28.0 * 0.95 and big > 2.5 * small


def test_sizey_split_drops_small_and_zero_runtime_types():
    tasks = [_task("big", x=i, usage=1 + i) for i in range(50)]
    tasks += [_task("small", x=i, usage=1 + i) for i in range(MIN_TYPE_ROWS - 1)]
    tasks += [_task("zero", x=i, usage=1 + i, runtime=0.0 if i == 3 else 5.0) for i in range(50)]
    tasks += [_task("big", usage=0.0)]  # no usage: not a row
    split = list(sizey_split(tasks, 1996))
    assert [s[0] for s in split] == ["big"]
    _, train, test = split[0]
    assert len(train) == 15 and len(test) == 35
    assert {t.input_bytes for t in train}.isdisjoint(t.input_bytes for t in test)
    again = list(sizey_split(tasks, 1996))[0][2]
    other = list(sizey_split(tasks, 7))[0][2]
    assert [t.input_bytes for t in again] == [t.input_bytes for t in test]
    assert [t.input_bytes for t in other] != [t.input_bytes for t in test]


def test_chronological_learns_only_finished_tasks():
    G = 1e9  # harpd sizes in MiB above a 100 MB floor: tasks of GB
    first = _task(usage=2.0 * G, submit=0.0, end=100.0, request=8.0 * G)
    sibling = _task(usage=2.0 * G, submit=10.0, end=110.0, request=8.0 * G)  # submitted while the first runs
    later = [_task(usage=2.0 * G, submit=200.0 + i, end=200.5 + i, request=8.0 * G) for i in range(5)]
    res = run_chronological([first, sibling, *later])
    # the two first tasks know nothing and keep the request (8 for usage 2): over 6 each, times their runtime
    cold = 2 * 6.0 * G * 10.0 / GBH
    assert res.rows["harp"].over_gbh > cold * 0.999
    assert res.rows["request"].over_gbh == pytest.approx(7 * 6.0 * G * 10.0 / GBH)
    assert res.rows["harp"].wastage_gbh < res.rows["request"].wastage_gbh


def test_harp_beats_the_percentile_when_memory_follows_input(tmp_path):
    p = synthetic_trace(tmp_path / "wf.trace.csv")
    for proto in ("sizey", "chronological"):
        rows = replay_workflow(p, proto, 1996).rows
        assert rows["harp"].tasks == rows["witt-percentile"].tasks > 0
        assert rows["harp"].wastage_gbh < rows["witt-percentile"].wastage_gbh
        assert rows["harp"].wastage_gbh < rows["request"].wastage_gbh


def test_protocol_sizey_needs_a_nextflow_trace(tmp_path):
    p = tmp_path / "log.swf"
    p.write_text("1 0 5 100 4 -1 -1 4 1000 -1 1 1 1 1 1 -1 -1 -1\n")
    with pytest.raises(WorkflowReplayError, match="Nextflow"):
        replay_workflow(p, "sizey")


def test_cli_protocol_sizey_prints_the_table(tmp_path, capsys, cfg):
    p = synthetic_trace(tmp_path / "wf.trace.csv")
    assert harp(["replay", str(p), "--resource", "mem", "--protocol", "sizey", "--seed", "5", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "sizey, seed 5" in out and "Witt percentile" in out and "harp / best baseline" in out
    assert harp(["replay", str(p), "--resource", "mem", "--protocol", "sizey", "--format", "json", "--quiet"]) == 0
    rep = json.loads(capsys.readouterr().out)["workflow"]
    assert rep["seed"] == 1996 and rep["tasks"] == 3 * (60 - 18) and rep["rows"]["harp"]["tasks"] == rep["tasks"]


@pytest.mark.parametrize(
    "extra,needle",
    [(["--protocol", "sizey"], "--resource mem"), (["--resource", "mem", "--protocol", "sizey"], "Nextflow trace")],
)
def test_cli_protocol_errors_are_one_line(tmp_path, capsys, cfg, extra, needle):
    p = tmp_path / "log.swf"
    p.write_text("1 0 5 100 4 -1 -1 4 1000 -1 1 1 1 1 1 -1 -1 -1\n")
    assert harp(["replay", str(p), *extra, "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err and "Traceback" not in err


def test_cli_mem_replay_of_a_nextflow_trace_adds_the_chronological_table(tmp_path, capsys, cfg):
    p = synthetic_trace(tmp_path / "wf.trace.csv", per_type=40)
    assert harp(["replay", str(p), "--resource", "mem", "--models", "request,harp", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "users' requests" in out and "Sizey's wastage (chronological, decided at start)" in out
    assert out.index("resource mem") < out.index("Sizey's wastage")


def test_cli_decide_at_submit_and_a_bad_value_is_one_line(tmp_path, capsys, cfg):
    p = synthetic_trace(tmp_path / "wf.trace.csv", per_type=40)
    assert (
        harp(["replay", str(p), "--resource", "mem", "--models", "request,harp", "--decide-at", "submit", "--quiet"])
        == 0
    )
    assert "Sizey's wastage (chronological, decided at submit)" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exc:  # argparse's own refusal: the usage line and one error line
        harp(["replay", str(p), "--resource", "mem", "--decide-at", "later", "--quiet"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "--decide-at" in err.splitlines()[-1] and "Traceback" not in err
