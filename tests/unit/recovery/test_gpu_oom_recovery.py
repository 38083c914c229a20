"""A DNN job that ran out of GPU memory is resubmitted one configuration larger (#47).

Through the real ingest poller and recovery machine, with the daemon's DNN
planner (``harpd.dnn.oom_escalation.OomPlanner``) injected, against the fake
Slurm of the recovery tests: the run's sacct record is FAILED with its
``gres/gpumem`` peak at 95% of the GPU.
"""

from __future__ import annotations

import dataclasses

import pytest
from resubmit_fakes import fake, store  # noqa: F401 (fixtures)

from harpd.cli.status_cmd import render
from harpd.config import HarpSettings
from harpd.dnn.oom_escalation import GPUS_ENV, ZERO_ENV, OomPlanner
from harpd.dnn.plan import plan_dnn_job
from harpd.ingest.poller import Ingestor
from harpd.protocol import Decision, Resources
from harpd.records import Outcome
from harpd.recovery import machine as rs
from harpd.report.status_view import JobStatus

LINE = "#HARP dnn params=1.5e9 layers=48 hidden=1600 heads=25 seq_len=1024 micro_batch=8 attention=flash"
GPU_TYPES = [
    {"name": "a100", "memory_gb": 80, "gpus_per_node": 8, "billing_weight": 1.0, "partition": "gpu-a100"},
    {"name": "h100", "memory_gb": 80, "gpus_per_node": 4, "billing_weight": 2.5, "partition": "gpu-h100"},
]


def _settings(**recovery):
    return HarpSettings(
        ingest={"poll_interval_s": 5},
        recovery={"mode": "resubmit", **recovery},
        dnn={"gpu_types": GPU_TYPES},
    )


def _machine(store, fake, settings):
    ing = Ingestor(store, fake, settings)
    rec = rs.Recovery(store, fake, settings, watch=ing.watch, gpu_planner=OomPlanner(store, settings))
    ing.on_outcome.append(rec.on_outcome)
    return ing, rec


def _submit(fake, store, settings, line):
    """A DNN job as harp-submit registers it: harpd's plan applied on the command line."""
    plan = plan_dnn_job([line], {}, "/tmp", settings)
    assert plan.error is None
    chosen = plan.explain["dnn"]["chosen"]
    jid = fake.add_job(time_s=600, mem_mb=4000, partition=chosen["partition"], script="#!/bin/bash\n" + line + "\n")
    argv = ["--time=10", "--mem=4000M", *(f"--{c.option}={c.value}" for c in plan.changes), "train.sh"]
    j = fake.state["jobs"][jid]
    job = {
        "partition": None,
        "job_name": j["name"],
        "signature": "sig-train",
        "cwd": "/tmp",
        "harp_lines": [line],
        "commands": ["srun python train.py"],
        "argv": argv,
        "sbatch_env": {},
    }
    res = {"time_s": 600, "mem_mb": 4000, "partition": None}
    decision = {
        "changes": [c.model_dump() for c in plan.changes],
        "limits": {},
        "model": "zero-dnn",
        "explain": plan.explain,
    }
    store.add_submission(
        jid,
        j["uid"],
        j["user"],
        job,
        Resources.model_validate(res),
        Resources.model_validate({**res, "partition": chosen["partition"]}),
        (None if decision is None else Decision.model_validate(decision)),
    )
    return jid, chosen


def _oom(fake, jid, chosen):
    fake.end_run(jid, Outcome.FAILED, gpus=chosen["n_gpus"], gpumem_mb=chosen["capacity_gib"] * 1024 * 0.95)


def _opts(argv):
    return dict(a[2:].split("=", 1) for a in argv if a.startswith("--") and "=" in a)


def test_out_of_gpu_memory_is_resubmitted_larger_each_time_then_stops(store, fake):
    settings = _settings()
    ing, _ = _machine(store, fake, settings)
    jid, chosen = _submit(fake, store, settings, LINE + " zero=auto")
    assert (chosen["n_gpus"], chosen["zero"]) == (1, 0)
    _oom(fake, jid, chosen)
    ing.poll_once()

    rows = store.attempts(jid)
    assert [(r.attempt, r.step, r.outcome) for r in rows] == [(1, "done", "failed"), (2, "submitted", None)]
    second = rows[1]
    assert second.limits["escalated"] == "gpu" and second.limits["mode"] == "resubmit"
    assert second.reason.startswith("ran out of GPU memory on 1 x a100 (80 GiB), ZeRO 0; next: ")
    to = second.limits["gpu"]["to"]
    assert (to["gpu_type"], to["n_gpus"], to["zero"]) != ("a100", 1, 0) and to["zero"] > 0
    (call,) = fake.calls("submit")
    opts = _opts(call[1])
    assert opts["gres"] == f"gpu:{to['gpu_type']}:{to['n_gpus'] // to['nodes']}"
    assert opts["nodes"] == str(to["nodes"]) and opts["ntasks-per-node"] == str(to["n_gpus"] // to["nodes"])
    assert opts["partition"] == f"gpu-{to['gpu_type']}" and opts["time"] == "10" and opts["mem"] == "4000M"
    assert sum(a.startswith("--gres=") for a in call[1]) == 1  # the first run's --gres replaced, not repeated
    new = second.job_id
    env = fake.state["jobs"][new]["env"]
    assert env[ZERO_ENV] == str(to["zero"]) and env[GPUS_ENV] == str(to["n_gpus"])
    assert env["PATH"] == "/opt/sw/bin:/usr/bin"  # the job's own environment otherwise
    sub = store.get_submission(new)
    assert sub.chain_id == jid and sub.stored["decision"]["explain"]["dnn"]["chosen"]["n_gpus"] == to["n_gpus"]
    assert sub.stored["submitted"]["gres"] == opts["gres"]
    assert {c["option"] for c in sub.stored["decision"]["changes"]} >= {"gres", "nodes", "ntasks-per-node"}
    text = render(
        JobStatus(job_id=jid, user="alice", attempts=tuple(dataclasses.asdict(r) for r in store.attempts(jid)))
    )
    assert f"GPUs: --gres={opts['gres']} --nodes={to['nodes']}" in text
    assert f"environment: {GPUS_ENV}={to['n_gpus']} {ZERO_ENV}={to['zero']}" in text

    # the larger configuration runs out too: its own registration makes it an observation, one step larger again
    fake.end_run(new, Outcome.FAILED, gpus=to["n_gpus"], gpumem_mb=to["capacity_gib"] * 1024 * 0.95)
    ing.poll_once()
    rows = store.attempts(jid)
    assert [(r.attempt, r.step) for r in rows] == [(1, "done"), (2, "done"), (3, "submitted")]
    third = rows[2].limits["gpu"]["to"]
    seen = {("a100", 1, 0), (to["gpu_type"], to["n_gpus"], to["zero"])}
    assert (third["gpu_type"], third["n_gpus"], third["zero"]) not in seen

    # at the last attempt: no attempts left, one line, nothing resubmitted
    fake.end_run(rows[2].job_id, Outcome.FAILED, gpus=third["n_gpus"], gpumem_mb=third["capacity_gib"] * 1024)
    ing.poll_once()
    rows = store.attempts(jid)
    assert len(rows) == 3 and len(fake.calls("submit")) == 2
    assert rows[2].limits["stop"].startswith("attempt 3 of 3 ran out of GPU memory on ")
    ing.poll_once()
    assert len(fake.calls("submit")) == 2


def test_nothing_larger_fits_stops_with_the_reason_and_submits_nothing(store, fake):
    """At ZeRO 0 (the line's stage, not auto) more GPUs hold as much each: nothing larger, and the reason says so."""
    settings = _settings()
    ing, _ = _machine(store, fake, settings)
    jid, chosen = _submit(fake, store, settings, LINE)
    _oom(fake, jid, chosen)
    ing.poll_once()
    (row,) = store.attempts(jid)
    assert row.limits["stop"].startswith(
        "ran out of GPU memory on 1 x a100 (80 GiB), ZeRO 0; no larger configuration fits: no configured GPU fits"
    )
    assert "zero=auto" in row.limits["stop"] and "\n" not in row.limits["stop"]
    assert fake.calls("submit") == []
    ing.poll_once()
    assert fake.calls("submit") == [] and len(store.attempts(jid)) == 1


@pytest.mark.parametrize("gpumem_share", [None, 0.5])
def test_a_failure_that_is_not_out_of_gpu_memory_is_not_recovered(store, fake, gpumem_share):
    settings = _settings()
    ing, _ = _machine(store, fake, settings)
    jid, chosen = _submit(fake, store, settings, LINE + " zero=auto")
    peak = None if gpumem_share is None else chosen["capacity_gib"] * 1024 * gpumem_share
    fake.end_run(jid, Outcome.FAILED, gpus=chosen["n_gpus"], gpumem_mb=peak)
    ing.poll_once()
    assert store.attempts(jid) == [] and fake.calls("submit") == []


def test_without_the_planner_a_gpu_out_of_memory_is_left_alone(store, fake):
    settings = _settings()
    ing = Ingestor(store, fake, settings)
    rec = rs.Recovery(store, fake, settings, watch=ing.watch)
    ing.on_outcome.append(rec.on_outcome)
    jid, chosen = _submit(fake, store, settings, LINE + " zero=auto")
    _oom(fake, jid, chosen)
    ing.poll_once()
    assert store.attempts(jid) == [] and fake.calls("submit") == []


def test_requeue_mode_resubmits_a_larger_configuration(store, fake):
    settings = _settings(mode="requeue")
    ing, _ = _machine(store, fake, settings)
    jid, chosen = _submit(fake, store, settings, LINE + " zero=auto")
    _oom(fake, jid, chosen)
    ing.poll_once()
    rows = store.attempts(jid)
    assert rows[1].step == "submitted" and rows[1].limits["mode"] == "resubmit"
    assert "new job with its own environment" in rows[1].limits["note"]
    assert fake.calls("requeue_hold") == [] and len(fake.calls("submit")) == 1


def test_a_larger_configuration_that_then_times_out_keeps_its_gpus(store, fake):
    """Raising the time of the attempt that got more GPUs must not fall back to the first run's GPUs."""
    settings = _settings()
    ing, _ = _machine(store, fake, settings)
    jid, chosen = _submit(fake, store, settings, LINE + " zero=auto")
    _oom(fake, jid, chosen)
    ing.poll_once()
    second = store.attempts(jid)[1]
    fake.end_run(str(second.job_id), Outcome.TIMEOUT)
    ing.poll_once()
    rows = store.attempts(jid)
    assert [(r.attempt, r.step) for r in rows] == [(1, "done"), (2, "done"), (3, "submitted")]
    assert rows[2].limits["escalated"] == "time" and rows[2].limits["time_s"] == 1200
    first_call, third_call = fake.calls("submit")
    assert _opts(third_call[1])["gres"] == _opts(first_call[1])["gres"] != "gpu:a100:1"
    assert _opts(third_call[1])["time"] == "20"
    # its registration still names the configuration it runs in, so an out-of-memory there is learnt
    dnn = store.get_submission(str(rows[2].job_id)).stored["decision"]["explain"]["dnn"]
    assert dnn["chosen"]["n_gpus"] == second.limits["gpu"]["to"]["n_gpus"]
