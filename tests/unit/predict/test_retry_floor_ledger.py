"""The retry floor reads the limits ledger: never a size the task already ran out at (#45 B, E)."""

from __future__ import annotations

import time

from test_retry_floor import WRAP, _job, _mem, _register, _sig, setup  # noqa: F401 (fixture)

from harpd.predict.live import ModelPredictor
from harpd.records import JobRecord, Outcome
from harpd.store import Resize


def _run(job_id: str, outcome: Outcome, mem_mb: float, used_mb: float | None, end: float) -> JobRecord:
    """A run of the rule (``_sig``) sacct reported."""
    return JobRecord(
        job_id=job_id,
        user="alice",
        signature=_sig(),
        outcome=outcome,
        req_mem_mb=mem_mb,
        used_mem_mb=used_mb,
        submit_time=end - 50,
        end_time=end,
    )


def test_the_retry_of_a_task_recovery_doubled_and_the_resizer_shrank_is_above_every_size_it_ran_out_at(setup):
    """Job 53: 541M (out), 1082M (out), 2000M re-sized to 541M (out): the manager's retry gets more than 1082M."""
    s, st = setup
    p = ModelPredictor(s, store=st)
    first = _mem(p.decide(_job(), "alice", 1000))
    assert first < 600
    _register(st, "53", first, outcome=Outcome.OOM)
    st.add_attempt("53", 1, "53", {"time_s": 1800, "mem_mb": first}, "first run", "done")
    st.add_attempt("53", 2, "53", {"time_s": 1800, "mem_mb": 2 * first, "escalated": "mem"}, "ran out of mem", "done")
    st.add_attempt("53", 3, "53", {"time_s": 1800, "mem_mb": 2000, "escalated": "mem"}, "ran out of mem", "done")
    st.add_limit_change("53", "resize-mem", 1800, 1800, "re-decided", "done", mem=Resize(2000, first))
    d = p.decide(_job(), "alice", 1000)
    assert _mem(d) > 2 * first, d.explain  # before the ledger: 2 x the last size, which attempt 2 ran out at
    assert f"ran out of mem at {2 * first}M" in d.explain["retry"]["reason"], d.explain


def test_a_siblings_recent_oom_lifts_another_task_of_the_rule_and_the_reason_names_it(setup):
    s, st = setup
    p = ModelPredictor(s, store=st)
    other = WRAP.replace("sample=s1", "sample=s9")
    first = _mem(p.decide(_job(wrap=other), "alice", 1000))
    assert first < 600
    now = time.time()
    oom = _run("77", Outcome.OOM, 700.0, None, now - 10)
    st.insert_jobs([oom])
    d = p.decide(_job(), "alice", 1000)  # sample s1: another task of the same rule
    assert _mem(d) == 1400, d.explain
    (mem,) = [c for c in d.changes if c.option == "mem"]
    assert "job 77 ran out of mem at 700M" in mem.reason and "partition limit" not in mem.reason, mem.reason
    # a later run of the rule that completed using less releases it: the need went down again
    done = _run("78", Outcome.COMPLETED, 2000.0, 300.0, now - 1)
    st.insert_jobs([done])
    assert _mem(p.decide(_job(wrap=WRAP.replace("s1", "s3")), "alice", 1000)) < 700
