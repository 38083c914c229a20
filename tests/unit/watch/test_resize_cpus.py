"""Pending CPUs re-sized at start, as memory is."""

from __future__ import annotations

from watch_fakes import settings, slurm, store  # noqa: F401 (fixtures)

from harpd.protocol import Decision, Resources
from harpd.records import JobRecord, Outcome
from harpd.watch.resize import Fresh, Resizer

TASK = "wf:0123456789abcdef"


def _register(store, jid: str, *, cpus: int, harp_cpus: int | None, signature: str = TASK, ntasks: int = 1) -> None:
    changes = (
        []
        if harp_cpus is None
        else [{"option": "cpus-per-task", "value": str(harp_cpus), "old": str(cpus), "reason": "cores"}]
    )
    original = {"time_s": 3600, "cpus_per_task": cpus, "ntasks": ntasks}
    job = {"signature": signature, "job_name": "job.sh", "partition": "debug", "request": original, "harp_lines": []}
    store.add_submission(
        jid,
        1000,
        "alice",
        job,
        Resources.model_validate(original),
        Resources.model_validate({**original, "cpus_per_task": harp_cpus or cpus}),
        Decision.model_validate({"changes": changes, "limits": {}, "model": "m", "explain": {}}),
        verified=True,
    )


def _resizer(store, slurm, cpus):
    return Resizer(
        store, slurm, settings(resize_min_ratio=0.1, resize_min_s=300), lambda sub: Fresh(cpus=cpus.get(sub.job_id))
    )


def _outcome(signature=TASK):
    return JobRecord(job_id="1", source="slurm", outcome=Outcome.COMPLETED, signature=signature)


def test_a_pending_task_gets_the_cpus_its_finished_siblings_say_once_within_its_request(store, slurm):
    _register(store, "50", cpus=8, harp_cpus=None)  # a workflow task harp left as asked (cold)
    slurm.add("50", state="PENDING", limit_s=3600, cpus=8)
    _register(store, "51", cpus=4, harp_cpus=2)  # harp lowered it; its rule's runs now say keep 4
    slurm.add("51", state="PENDING", limit_s=3600, cpus=2)
    _register(store, "52", cpus=4, harp_cpus=None, signature="sig-plain")  # not a task, not lowered: not harp's
    slurm.add("52", state="PENDING", limit_s=3600, cpus=4)
    _register(store, "53", cpus=8, harp_cpus=None)
    slurm.add("53", state="RUNNING", limit_s=3600, cpus=8)  # started: never changed
    r = _resizer(store, slurm, {"50": 3, "51": None, "52": 1, "53": 1})
    r.on_outcome(_outcome())
    r.on_outcome(_outcome("sig-plain"))
    assert r.tick(slurm.queue()) == 2
    assert slurm.jobs["50"].cpus_per_task == 3 and slurm.jobs["51"].cpus_per_task == 4
    assert ("50", {"CPUsPerTask": "3", "MinCPUsNode": "3", "NumCPUs": "3"}) in slurm.updates
    assert slurm.jobs["52"].cpus_per_task == 4 and slurm.jobs["53"].cpus_per_task == 8
    (row,) = store.limit_changes("50")
    assert (row.kind, row.old_cpus, row.new_cpus, row.step) == ("resize-cpus", 8, 3, "done")
    r.on_outcome(_outcome())
    assert r.tick(slurm.queue()) == 0  # already there: never twice


def test_never_above_the_request_and_a_refusal_is_recorded(store, slurm):
    _register(store, "60", cpus=4, harp_cpus=None)
    slurm.add("60", state="PENDING", limit_s=3600, cpus=4)
    slurm.update_error = "scontrol update JobId=60 failed (exit 1): Access/permission denied"
    r = _resizer(store, slurm, {"60": 2})
    r.on_outcome(_outcome())
    assert r.tick(slurm.queue()) == 0
    (row,) = store.limit_changes("60")
    assert row.step == "refused" and "permission" in row.reason
    _register(store, "61", cpus=4, harp_cpus=None)
    slurm.add("61", state="PENDING", limit_s=3600, cpus=4)
    r = _resizer(store, slurm, {"61": 16})
    r.on_outcome(_outcome())
    r.tick(slurm.queue())
    assert slurm.jobs["61"].cpus_per_task == 4 and store.limit_changes("61") == []


def test_a_registration_that_carries_commands_not_a_signature_is_matched_by_its_outcome(store, slurm):
    """harp-submit sends the commands; harpd's outcome carries the signature computed from them."""
    from harpd.features.workflow import job_signature

    commands = ["bash hidden_step.sh"]
    original = {"time_s": 3600, "cpus_per_task": 2}
    job = {
        "signature": None,
        "commands": commands,
        "job_name": "hidden.sh",
        "script_name": "hidden.sh",
        "cwd": "/home/alice",
        "request": original,
    }
    changes = [{"option": "cpus-per-task", "value": "1", "old": "2", "reason": "cores"}]
    store.add_submission(
        "70",
        1000,
        "alice",
        job,
        Resources.model_validate(original),
        Resources.model_validate({**original, "cpus_per_task": 1}),
        Decision.model_validate({"changes": changes, "limits": {}, "model": "m", "explain": {}}),
        verified=True,
    )
    slurm.add("70", state="PENDING", limit_s=3600, cpus=1)
    r = _resizer(store, slurm, {"70": None})  # the script's CPUs were restored: its request again
    r.on_outcome(_outcome(job_signature(commands, "hidden.sh", "hidden.sh", "/home/alice")))
    assert r.tick(slurm.queue()) == 1 and slurm.jobs["70"].cpus_per_task == 2
