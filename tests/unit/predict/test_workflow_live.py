"""harpd sizes a workflow task's memory by its type's model of usage on input size (harpd.predict.workflow_live).

The same rule ``harp replay``'s workflow table scores as "harp": a task type
with ``min_history`` finished runs gets the model's first allocation through
the guard rails; runs killed at their limit are not learnt; a type never
seen keeps its request (no cross-type prior, issue 21); the model is refitted
in the background refresh, never on a request.
"""

from __future__ import annotations

import math

import pytest

from harpd.config import HarpSettings
from harpd.features.workflow import job_signature
from harpd.predict import workflow_harp
from harpd.predict.allocation import Guard
from harpd.predict.live import ModelPredictor
from harpd.predict.sizey_metric import GBH
from harpd.predict.workflow_harp import HarpTaskModel
from harpd.predict.workflow_live import RULE, TaskModels, first_allocation, new_model
from harpd.predict.workflow_replay import Task, run_chronological
from harpd.protocol import JobRequest
from harpd.records import JobRecord, Outcome
from harpd.store import Store

T0 = 1_700_000_000.0
CWD = "/home/alice/wf"
GIB = 1024.0 ** 3
REQ_MB = 8000.0


def _wrap(rule: str, sample: str) -> str:
    return (f"python -m snakemake --snakefile Snakefile --target-jobs '{rule}:sample={sample}' "
            f"--allowed-rules {rule} --cores all --attempt 1 --mode remote")


def _sig(rule: str) -> str:
    return job_signature([_wrap(rule, "s0")], "run-uuid", None, CWD)


def _mem(x_gib: float) -> float:
    """MB a run of ``align`` uses: 1000 MB plus 1000 MB per GiB of input."""
    return 1000.0 + 1000.0 * x_gib


def _runs(rule: str, xs: list[float], start: int = 0, outcome: Outcome = Outcome.COMPLETED,
          used=_mem) -> list[JobRecord]:
    return [JobRecord(job_id=f"{rule}{start + i}", source="slurm", user="alice", account="a", partition="cpu",
                      signature=_sig(rule), submit_time=T0 + 100 * (start + i), start_time=T0 + 100 * (start + i),
                      end_time=T0 + 100 * (start + i) + 60.0, used_time_s=60.0, req_time_s=1800.0, req_cpus=2,
                      req_mem_mb=REQ_MB, used_mem_mb=used(x), input_bytes=int(x * GIB), outcome=outcome,
                      censored_mem=outcome == Outcome.OOM)
            for i, x in enumerate(xs)]


XS = [1.0, 4.0, 2.0, 5.0, 1.5, 3.0, 4.5, 2.5]


def _task(rule: str, x_gib: float | None) -> JobRequest:
    return JobRequest(partition="cpu", job_name="new-run-uuid", cwd=CWD, commands=[_wrap(rule, "s9")],
                      input_bytes=None if x_gib is None else int(x_gib * GIB),
                      request={"time_s": 1800, "mem_mb": int(REQ_MB), "cpus_per_task": 2, "ntasks": 1})


@pytest.fixture
def store(tmp_path):
    settings = HarpSettings(store={"path": str(tmp_path / "h.db")})
    st = Store.open(settings.store.path)
    st.insert_jobs(_runs("align", XS))
    yield settings, st
    st.close()


def _mem_change(decision) -> int | None:
    for c in decision.changes:
        if c.option == "mem":
            return int(c.value.rstrip("M"))
    return None


def _model_of(xs: list[float]) -> HarpTaskModel:
    m = new_model()
    for x in xs:
        m.learn(x * GIB, _mem(x), 60.0, REQ_MB)
    return m


def test_a_task_type_with_enough_runs_gets_its_models_allocation_and_input_size_moves_it(store) -> None:
    settings, st = store
    p = ModelPredictor(settings, store=st)
    guard = Guard.from_settings(settings.predict, "mem", settings.recovery.max_attempts)
    got = {}
    for x in (3.5, 4.8):
        d = p.decide(_task("align", x), "alice", 1000)
        want, _ = first_allocation(_model_of(XS), x * GIB, REQ_MB, len(XS), None, guard)
        assert want is not None and _mem_change(d) == math.ceil(want), d.explain
        assert d.explain["mem"]["rule"] == RULE and RULE in d.changes[-1].reason
        got[x] = _mem_change(d)
    # the history rule would give both 1.1 x the most of the last five runs; the model follows the input
    assert got[3.5] < _mem(3.5) * 1.6 and got[4.8] - got[3.5] > 0.9 * (_mem(4.8) - _mem(3.5))
    assert all(v < REQ_MB for v in got.values())
    # time stays the history rule
    assert p.decide(_task("align", 3.5), "alice", 1000).explain["time"]["rule"] == "history"


def test_a_task_without_an_input_size_is_sized_as_input_zero_and_never_below_the_guard(store) -> None:
    settings, st = store
    d = ModelPredictor(settings, store=st).decide(_task("align", None), "alice", 1000)
    assert _mem_change(d) == int(REQ_MB * 0.25)  # the walk-back floor: a quarter of the request (3 attempts)


def test_runs_killed_at_their_limit_are_not_learnt(store) -> None:
    settings, st = store
    # an old OOM kill reports 7900 MB at its limit: a lower bound, followed by a completed re-run
    st.insert_jobs(_runs("align", [4.0], start=50, outcome=Outcome.OOM, used=lambda x: 7900.0))
    st.insert_jobs(_runs("align", XS, start=60))
    p = ModelPredictor(settings, store=st)
    model = p._tasks.get(_sig("align"))
    assert model is not None and len(model.y) == 2 * len(XS) and max(model.y) == _mem(5.0)
    assert p.decide(_task("align", 3.5), "alice", 1000).explain["mem"]["rule"] == RULE
    tm = TaskModels()
    assert not tm.learn("s", 1.0, 7900.0, 60.0, REQ_MB, censored=True) and tm.refitted() == {}


def test_a_recent_kill_keeps_the_request(store) -> None:
    settings, st = store
    st.insert_jobs(_runs("align", [4.0], start=50, outcome=Outcome.OOM, used=lambda x: 7900.0))
    d = ModelPredictor(settings, store=st).decide(_task("align", 3.5), "alice", 1000)
    assert _mem_change(d) is None and "hit its limit" in d.explain["mem"]["reason"]


def test_a_rule_never_seen_keeps_its_request_whatever_other_rules_did(store) -> None:
    settings, st = store
    for k in range(12):  # many other rules, each right-sizable: no prior carries over
        st.insert_jobs(_runs(f"rule{k}", XS, start=100 * (k + 1)))
    p = ModelPredictor(settings, store=st)
    d = p.decide(_task("unseen", 2.0), "alice", 1000)
    assert _mem_change(d) is None and "cold start: 0 of" in d.explain["mem"]["reason"]
    assert p._tasks.get(_sig("unseen")) is None and len(p._tasks) == 13


def test_refits_happen_in_the_refresh_once_per_type_never_on_a_request(store, monkeypatch) -> None:
    settings, st = store
    st.insert_jobs(_runs("sort", XS * 3, start=500))
    calls: list[int] = []
    real = workflow_harp.HarpTaskModel._refit
    monkeypatch.setattr(workflow_harp.HarpTaskModel, "_refit", lambda self: (calls.append(1), real(self))[1])
    p = ModelPredictor(settings, store=st)  # reload: 8 + 24 runs of two types
    assert len(calls) == 2
    for x in (1.0, 2.0, 3.0, 4.0):
        for rule in ("align", "sort"):
            assert p.decide(_task(rule, x), "alice", 1000).explain["mem"]["rule"] == RULE
    assert len(calls) == 2
    st.insert_jobs(_runs("sort", [2.0, 3.0], start=900))
    p.refresh()
    assert len(calls) == 3  # one more batch: only the type it touched


def test_lazy_refit_gives_the_eager_figures_and_the_window_keeps_the_last_runs() -> None:
    eager, lazy = HarpTaskModel(), HarpTaskModel()
    for i, x in enumerate(XS * 4):
        eager.learn(x, _mem(x) * (1 + 0.01 * (i % 7)), 60.0 + i, REQ_MB)
        eager.refit()
        lazy.learn(x, _mem(x) * (1 + 0.01 * (i % 7)), 60.0 + i, REQ_MB)
    assert lazy.dirty and lazy.first(3.3, REQ_MB) == eager.first(3.3, REQ_MB) and not lazy.dirty
    assert eager.refits == len(XS) * 4 and lazy.refits == 1
    w = HarpTaskModel(window=5)
    for x in XS:
        w.learn(x, _mem(x), 60.0, REQ_MB)
    assert w.x == XS[-5:]


def test_the_replays_harp_row_is_the_live_rule_guards_included() -> None:
    # five tasks of one type end, then a sixth of the same usage: the model sizes it at about its
    # usage, 1 GB, but the live rule's walk-back floor holds it at a quarter of its 8 GB request
    done = [Task("P", 1.0, 1 * GIB, 1 * GIB, 100.0, 8 * GIB, float(i), 100.0 + i) for i in range(5)]
    later = Task("P", 1.0, 1 * GIB, 1 * GIB, 100.0, 8 * GIB, 500.0, 600.0)
    res = run_chronological([*done, later])
    over = res.rows["harp"].over_gbh * GBH
    assert over == pytest.approx(5 * 7 * GIB * 100.0 + (2 - 1) * GIB * 100.0)
    assert res.rows["harp+prior"].over_gbh * GBH < 5 * 7 * GIB * 100.0 + 0.5 * GIB * 100.0
    # with the floor neutralised, the live rule is the model's own figure
    free = run_chronological([*done, later], guard=Guard(min_fraction=0.0, floor=1.0, leave_alone_ratio=1.0))
    assert free.rows["harp"].over_gbh == pytest.approx(res.rows["harp+prior"].over_gbh)
