"""Workflow rules are sized from their own runs only.

Snakemake's jobs all run ``python -m snakemake``; before harp knew rules
apart, a never-seen rule was cut "from 40 similar runs" of other rules and
timed out.  Now a rule with runs of its own is right-sized from them (time
and memory, with or without a trained model) and an unseen rule is left as
requested.
"""

from __future__ import annotations

import numpy as np
import pytest

from harpd.config import HarpSettings
from harpd.features.workflow import job_signature
from harpd.models.envelope import ModelEnvelope
from harpd.predict.live import ModelPredictor
from harpd.protocol import JobRequest
from harpd.records import JobRecord, Outcome
from harpd.store import Store

T0 = 1_700_000_000.0
CWD = "/home/alice/wf"


def _wrap(rule: str, sample: str) -> str:
    return (
        f"python -m snakemake --snakefile Snakefile --target-jobs '{rule}:sample={sample}' "
        f"--allowed-rules {rule} --cores all --attempt 1 --mode remote"
    )


def _runs(rule: str, n: int, used_s: float, rss_mb: float) -> list[JobRecord]:
    sig = job_signature([_wrap(rule, "s0")], "run-uuid", None, CWD)
    return [
        JobRecord(
            job_id=f"{rule}{i}",
            source="slurm",
            user="alice",
            account="a",
            partition="cpu",
            signature=sig,
            submit_time=T0 + 100 * i,
            start_time=T0 + 100 * i,
            end_time=T0 + 100 * i + used_s,
            used_time_s=used_s,
            req_time_s=1800.0,
            req_cpus=2,
            req_mem_mb=2000.0,
            used_mem_mb=rss_mb,
            outcome=Outcome.COMPLETED,
        )
        for i in range(n)
    ]


def _task(rule: str, sample: str = "s9") -> JobRequest:
    return JobRequest(
        partition="cpu",
        job_name="new-run-uuid",
        cwd=CWD,
        commands=[_wrap(rule, sample)],
        request={"time_s": 1800, "mem_mb": 2000, "cpus_per_task": 2, "ntasks": 1},
    )


class _Eager:
    """A trained model that cuts everything to 1% of the request (it never looked at this rule)."""

    theta = 0.9

    def predict(self, X, groups=None):
        return np.full(len(X), np.log(0.01))


@pytest.fixture
def store(tmp_path):
    settings = HarpSettings(store={"path": str(tmp_path / "h.db")}, predict={"hard_cut_gain": 1.0})
    st = Store.open(settings.store.path)
    st.insert_jobs(_runs("work", 6, used_s=40.0, rss_mb=579.0))
    yield settings, st
    st.close()


def _changes(decision) -> dict[str, str]:
    return {c.option: c.value for c in decision.changes}


def test_a_rule_with_runs_of_its_own_is_right_sized_in_time_and_memory(store) -> None:
    settings, st = store
    d = ModelPredictor(settings, store=st).decide(_task("work"), "alice", 1000)
    ch = _changes(d)
    assert set(ch) == {"time", "mem"}, d.explain
    # memory by the task rule (harpd.predict.task_memory): six identical runs, no walk-back floor
    assert 579 <= int(ch["mem"].rstrip("M")) <= 640, ch["mem"]
    assert ch["time"] == "00:08:00"  # 1.1 x 40 s, held at the walk-back floor (a quarter of 30 min)
    assert d.explain["identity"]["task"] == "work" and d.explain["identity"]["instance"] == "sample=s9"


def test_a_snakemake_job_keeps_memory_for_the_manager_inside_it(store) -> None:
    """Snakemake runs itself in each job: its memory is never cut below the manager's floor."""
    settings, st = store
    st.insert_jobs(_runs("tiny", 6, used_s=40.0, rss_mb=120.0))
    d = ModelPredictor(settings, store=st).decide(_task("tiny"), "alice", 1000)
    mem = _changes(d)["mem"]
    assert mem == "300M", d.explain["mem"]
    assert "predict.manager_floor_mem_mb" in d.explain["mem"]["reason"] or any(
        "predict.manager_floor_mem_mb" in c.reason for c in d.changes
    )
    lower = settings.model_copy(update={"predict": settings.predict.model_copy(update={"manager_floor_mem_mb": 100})})
    d = ModelPredictor(lower, store=st).decide(_task("tiny"), "alice", 1000)
    assert 120 <= int(_changes(d)["mem"].rstrip("M")) <= 140, d.explain["mem"]  # without it: the rule's own runs
    higher = settings.model_copy(update={"predict": settings.predict.model_copy(update={"floor_mem_mb": 500})})
    d = ModelPredictor(higher, store=st).decide(_task("tiny"), "alice", 1000)
    reasons = " ".join(c.reason for c in d.changes if c.option == "mem")
    assert _changes(d)["mem"] == "500M" and "predict.floor_mem_mb" in reasons, reasons  # the floor that set it
    assert "manager_floor" not in reasons, reasons


def test_a_rule_never_seen_is_not_sized_from_other_rules(store) -> None:
    settings, st = store
    d = ModelPredictor(settings, store=st).decide(_task("slow"), "alice", 1000)
    assert d.changes == [], d.explain
    assert "cold start: 0 of" in d.explain["time"]["reason"]
    assert d.explain["identity"]["task"] == "slow"


def test_with_a_trained_model_workflow_tasks_still_follow_their_own_runs(store) -> None:
    settings, st = store
    env = {res: ModelEnvelope(model=_Eager(), name="eager", relative=True, resource=res) for res in ("time", "mem")}
    p = ModelPredictor(settings, store=st, models=env)
    p.load_history()
    unseen = p.decide(_task("slow"), "alice", 1000)
    assert unseen.changes == [], unseen.explain  # the model would have cut it to 1%
    seen = p.decide(_task("work"), "alice", 1000)
    assert _changes(seen)["time"] == "00:08:00" and "workflow task's own" in seen.changes[0].reason
    # an ordinary job still gets the model's answer
    plain = JobRequest(partition="cpu", signature="sig-prog", request={"time_s": 1800, "mem_mb": 2000})
    st.insert_jobs(
        [
            JobRecord(
                job_id=f"p{i}",
                source="slurm",
                user="alice",
                account="a",
                partition="cpu",
                signature="sig-prog",
                submit_time=T0 + 9000 + i,
                start_time=T0 + 9000 + i,
                end_time=T0 + 9009 + i,
                used_time_s=9.0,
                req_time_s=1800.0,
                req_mem_mb=2000.0,
                used_mem_mb=100.0,
                outcome=Outcome.COMPLETED,
            )
            for i in range(6)
        ]
    )
    p.load_history()
    d = p.decide(plain, "alice", 1000)
    assert d.model == "eager" and "time" in _changes(d)


def test_explain_names_the_program_and_an_arrays_tasks_share_it(store) -> None:
    settings, st = store
    p = ModelPredictor(settings, store=st)
    plain = JobRequest(
        partition="cpu", commands=["srun ./sim --seed $SLURM_ARRAY_TASK_ID"], array_size=6, request={"time_s": 600}
    )
    ident = p.decide(plain, "alice", 1000).explain["identity"]
    assert ident["program"] == "sim" and ident["array_tasks"] == 6 and ident["signature"].startswith("sig:")
    one = p.decide(plain.model_copy(update={"array_size": None}), "alice", 1000).explain["identity"]
    assert one["signature"] == ident["signature"] and "array_tasks" not in one
    # Snakemake's array submissions (one rule, many wildcards): the rule, with the count
    arr = _task("work").model_copy(update={"array_size": 6})
    ident = p.decide(arr, "alice", 1000).explain["identity"]
    assert ident["task"] == "work" and ident["array_tasks"] == 6
