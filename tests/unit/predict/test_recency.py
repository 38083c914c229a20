"""Sizes follow a program's recent runs (#45): growth is learnt fast, a run out of memory at X lifts its task
above X at once, a cancelled run is no evidence, and a Snakemake task's input size is not its Snakefile's."""

from __future__ import annotations

import numpy as np
import pytest

from harpd.config import HarpSettings
from harpd.features.usage import RecentRuns, says_nothing, usage_of
from harpd.features.workflow import identify, job_signature, registered_input_bytes
from harpd.predict.live import ModelPredictor
from harpd.predict.task_memory import TaskMemory
from harpd.predict.workflow_harp import HALF_LIFE, WINDOW, HarpTaskModel, recency_weights
from harpd.protocol import JobRequest
from harpd.records import JobRecord, Outcome
from harpd.store import Store
from tests.unit.predict.test_cores_rule import predictor  # noqa: F401  (the fixture: a predictor over a store)

T0 = 1_700_000_000.0
SIG = "wf:0123456789abcdef"


def _run(i: int, used_mb: float, outcome: Outcome = Outcome.COMPLETED, req_mb: float = 2000.0, **kw) -> JobRecord:
    t = T0 + 100.0 * i
    fields = dict(
        job_id=str(i),
        source="slurm",
        user="alice",
        account="a",
        partition="cpu",
        signature=SIG,
        submit_time=t,
        start_time=t,
        end_time=t + 60.0,
        used_time_s=60.0,
        req_time_s=1800.0,
        req_cpus=1,
        req_mem_mb=req_mb,
        used_mem_mb=used_mb,
        outcome=outcome,
        censored_mem=outcome is Outcome.OOM,
        censored_time=outcome is Outcome.TIMEOUT,
    )
    fields.update(kw)
    return JobRecord(**fields)


# -- recency of the workflow task model -------------------------------------------------------------


def test_recency_weights_halve_every_half_life_and_the_newest_weighs_one():
    w = recency_weights(2 * HALF_LIFE + 1)
    assert w[-1] == 1.0 and w[-1 - HALF_LIFE] == pytest.approx(0.5) and w[0] == pytest.approx(0.25)


def test_a_grown_rule_is_followed_within_a_few_runs_not_after_the_old_ones_are_outnumbered():
    """400 MB for 40 runs, then 1200: with all runs alike the old size held for as many runs as there were."""
    m = HarpTaskModel()
    for _ in range(40):
        m.learn(0.0, 400.0, 60.0, 2000.0)
    assert 400.0 <= m.first(0.0, 2000.0) < 600.0
    caught_up = None
    for k in range(1, 41):
        m.learn(0.0, 1200.0, 60.0, 2000.0)
        if m.first(0.0, 2000.0) >= 1200.0:
            caught_up = k
            break
    assert caught_up is not None and caught_up < 40 * 0.6, caught_up  # all runs alike: 41
    assert len(m.y) <= WINDOW


def test_after_growth_few_tasks_run_out_of_memory():
    """The issue's rule grown 400 -> 1200 MB: each task's attempts as harpd's escalation makes them."""
    tm = TaskMemory()
    for i in range(40):
        tm.learn(_run(i, 400.0))
    fails = 0
    for k in range(40):
        alloc = tm.size(SIG, None, 2000.0)[0] or 2000.0
        while alloc < 1200.0:  # it runs out, harpd learns that, its retry doubles
            fails += 1
            tm.learn(_run(100 + k, alloc, Outcome.OOM, req_mb=alloc))
            alloc = min(2.0 * alloc, 2000.0)
        tm.learn(_run(100 + k, 1200.0))
    assert fails <= 8, fails  # all runs alike and no lift: every one of the first 40 grown tasks ran out


def test_a_rule_that_does_not_change_keeps_its_size():
    rng = np.random.default_rng(7)
    m = HarpTaskModel()
    for u in rng.uniform(500.0, 600.0, 3 * WINDOW):
        m.learn(0.0, float(u), 60.0, 4000.0)
    assert 590.0 <= m.first(0.0, 4000.0) <= 800.0


# -- a run out of memory at X: its type above X at once --------------------------------------------------


def test_a_run_out_of_memory_lifts_its_type_above_what_it_ran_out_at():
    tm = TaskMemory()
    for i in range(20):
        tm.learn(_run(i, 400.0))
    before, _ = tm.size(SIG, None, 2000.0)
    assert before is not None and before < 600.0
    tm.learn(_run(20, before, Outcome.OOM, req_mb=before))  # harp gave it ``before`` and it ran out
    after, why = tm.size(SIG, None, 2000.0)
    assert after is not None and after > before and "ran out at" in why
    assert after == pytest.approx(1.5 * before)  # its escalation (2x), at most 1.5x
    # siblings that complete under what it ran out at: that run's own excess, not the type's
    tm.learn(_run(21, 300.0))
    assert tm.size(SIG, None, 2000.0)[0] == pytest.approx(before, rel=0.05)


def test_the_lift_holds_while_later_runs_need_more_and_never_passes_the_request():
    tm = TaskMemory()
    for i in range(20):
        tm.learn(_run(i, 400.0))
    tm.learn(_run(20, 500.0, Outcome.OOM, req_mb=500.0))
    tm.learn(_run(21, 1200.0))  # its retry: the type grew
    assert tm.size(SIG, None, 2000.0)[0] > 500.0
    lifted = tm.size(SIG, None, 2000.0)[0]
    assert lifted is not None and lifted <= 1.5 * 1200.0
    tm.learn(_run(22, 1500.0, Outcome.OOM, req_mb=1500.0))  # its escalation is the request itself
    assert tm.size(SIG, None, 2000.0) == (None, "a recent run of this task type ran out at 1500 MiB: request kept")
    assert tm.size(SIG, None, 4000.0)[0] == pytest.approx(2250.0)  # with more asked: 1.5 x 1500


def test_a_failed_or_cancelled_run_is_not_a_run_out_of_memory():
    tm = TaskMemory()
    for i in range(20):
        tm.learn(_run(i, 400.0))
    before = tm.size(SIG, None, 2000.0)[0]
    for i, outcome in enumerate((Outcome.FAILED, Outcome.CANCELLED, Outcome.TIMEOUT)):
        assert not tm.learn(_run(30 + i, 100.0, outcome))
    assert tm.size(SIG, None, 2000.0)[0] == before


# -- cancelled runs: no evidence either way ------------------------------------------------------------------


def test_a_cancelled_run_says_nothing_but_one_at_its_limit_ran_out():
    cancelled = _run(1, 100.0, Outcome.CANCELLED)
    assert says_nothing(cancelled, usage_of(cancelled, "mem"))
    full = _run(2, 2000.0, Outcome.CANCELLED)  # cancelled at its whole memory: it ran out
    assert not says_nothing(full, usage_of(full, "mem"))
    for outcome in (Outcome.FAILED, Outcome.TIMEOUT, Outcome.OOM, Outcome.NODE_FAIL, Outcome.COMPLETED):
        r = _run(3, 100.0, outcome)
        assert not says_nothing(r, usage_of(r, "mem")), outcome


def test_recent_runs_skip_cancellations_and_keep_failures_and_timeouts():
    recent = RecentRuns(8)
    for i in range(5):
        r = _run(i, 500.0)
        recent.add("g", r, usage_of(r, "mem"))
    for i in range(8):  # a Ctrl-C: the manager cancels eight running tasks early
        r = _run(10 + i, 50.0, Outcome.CANCELLED)
        recent.add("g", r, usage_of(r, "time"))
    assert not recent.stopped("g") and not recent.ran_out("g") and recent.most("g") == 500.0
    t = _run(20, 100.0, Outcome.TIMEOUT)
    recent.add("g", t, usage_of(t, "time"))
    assert recent.ran_out("g")
    f = _run(21, 100.0, Outcome.FAILED)
    recent.add("g", f, usage_of(f, "time"))
    assert recent.stopped("g")


def _time_of(p: ModelPredictor) -> str | None:
    job = JobRequest(partition="cpu", signature="sig-prog", request={"time_s": 1800, "mem_mb": 2000})
    d = p.decide(job, "alice", 1000)
    return next((c.value for c in d.changes if c.option == "time"), None)


def test_cancelled_runs_do_not_undo_a_cut_nor_lower_it_while_a_timeout_still_keeps_the_request(predictor):
    good = [_run(i, 500.0, signature="sig-prog", used_time_s=300.0) for i in range(6)]
    cut = _time_of(predictor(good, hard_cut_gain=1.0))
    assert cut is not None  # the program's own runs cut its 30 minutes
    cancelled = [_run(10 + i, 50.0, Outcome.CANCELLED, signature="sig-prog", used_time_s=5.0) for i in range(8)]
    # neither kept at the request nor cut to 5 s
    assert _time_of(predictor(good + cancelled, hard_cut_gain=1.0)) == cut
    timeout = [_run(30, 500.0, Outcome.TIMEOUT, signature="sig-prog", used_time_s=1800.0)]
    # a run that hit its limit keeps the request
    assert _time_of(predictor(good + cancelled + timeout, hard_cut_gain=1.0)) is None


# -- the input harp sees for a workflow task ---------------------------------------------------------------

WRAP = (
    "python -m snakemake --snakefile /home/alice/wf/Snakefile --target-jobs 'work:sample=s1' "
    "--allowed-rules work --cores all --attempt 1 --mode remote"
)


def test_a_snakemake_tasks_stated_input_is_its_snakefile_not_its_input():
    snake = identify([WRAP], "uuid", None, "/home/alice/wf")
    nf = identify(["bash .command.run"], "nf-ALIGN_(s1)", ".command.run", "/l/work/ab/cdef0123")
    assert snake is not None and not snake.inputs_seen and snake.input_bytes(848.0) is None
    assert nf is not None and nf.inputs_seen and nf.input_bytes(4096.0) == 4096.0
    job = {"commands": [WRAP], "job_name": "uuid", "cwd": "/home/alice/wf", "input_bytes": 848}
    assert registered_input_bytes(job) is None
    assert registered_input_bytes({"commands": ["python prog.py data.bin"], "input_bytes": 4096}) == 4096.0
    assert registered_input_bytes({"commands": [WRAP]}) is None


def test_the_live_decision_does_not_use_the_snakefiles_size(tmp_path):
    s = HarpSettings(store={"path": str(tmp_path / "h.db")})
    with Store.open(s.store.path) as st:
        p = ModelPredictor(s, store=st)
        job = JobRequest(cwd="/home/alice/wf", commands=[WRAP], input_bytes=848, request={"mem_mb": 2000})
        d = p.decide(job, "alice", 1000)
        assert "input_bytes" not in d.explain and "848 bytes" in d.explain["input_bytes_ignored"]
        sig = job_signature([WRAP], None, None, "/home/alice/wf")
        assert d.explain["identity"]["signature"] == sig
