"""Re-sizing pending jobs when their siblings' outcomes arrive."""

from __future__ import annotations

from watch_fakes import register, settings, slurm, store  # noqa: F401 (fixtures)

from harpd.records import JobRecord, Outcome
from harpd.watch.resize import Fresh, Resizer


def outcome(signature="sig-a"):
    return JobRecord(job_id="1", source="slurm", outcome=Outcome.COMPLETED, signature=signature)


def resizer(store, slurm, want):
    return Resizer(store, slurm, settings(resize_min_ratio=0.1, resize_min_s=300), lambda sub: Fresh(time_s=want[0]))


def test_pending_sibling_gets_the_new_bound_once(store, slurm):
    register(store, "20", original_s=7200, harp_time="60")
    slurm.add("20", state="PENDING", limit_s=3600)
    want = [1200]
    r = resizer(store, slurm, want)
    assert r.tick(slurm.queue()) == 0  # no outcome yet: nothing to re-decide
    r.on_outcome(outcome())
    assert r.tick(slurm.queue()) == 1
    assert slurm.jobs["20"].time_limit_s == 1200 and slurm.updates == [("20", {"TimeLimit": "20"})]
    assert [(c.kind, c.old_time_s, c.new_time_s, c.step) for c in store.limit_changes("20")] == [
        ("resize", 3600, 1200, "done")
    ]
    r.on_outcome(outcome())
    assert r.tick(slurm.queue()) == 0  # same bound: no change


def test_small_differences_other_signatures_running_and_foreign_jobs_are_left_alone(store, slurm):
    register(store, "21", original_s=7200, harp_time="60")
    slurm.add("21", state="PENDING", limit_s=3600)
    register(store, "22", original_s=7200, harp_time="60", signature="sig-b")
    slurm.add("22", state="PENDING", limit_s=3600)
    register(store, "23", original_s=7200, harp_time="60")
    slurm.add("23", state="RUNNING", limit_s=3600)
    register(store, "24", original_s=7200, harp_time=None)  # harp left its time alone
    slurm.add("24", state="PENDING", limit_s=7200)
    slurm.add("25", state="PENDING", limit_s=7200)  # not harp's
    r = resizer(store, slurm, [3400])  # 200 s less: under 300 s
    r.on_outcome(outcome())
    assert r.tick(slurm.queue()) == 0 and slurm.updates == []


def test_never_above_the_request_nor_below_the_floor(store, slurm):
    register(store, "26", original_s=5400, harp_time="30")
    slurm.add("26", state="PENDING", limit_s=1800)
    r = resizer(store, slurm, [99999])
    r.on_outcome(outcome())
    r.tick(slurm.queue())
    assert slurm.jobs["26"].time_limit_s == 5400
    register(store, "27", original_s=5400, harp_time="30")
    slurm.add("27", state="PENDING", limit_s=1800)
    r = resizer(store, slurm, [1])
    r.on_outcome(outcome())
    r.tick(slurm.queue())
    assert slurm.jobs["27"].time_limit_s == 60  # predict.floor_time_s


def test_array_pending_tasks_are_updated_through_the_array_id(store, slurm):
    register(store, "30", original_s=7200, harp_time="60")
    slurm.add("30", state="PENDING", limit_s=3600, array_job_id="30")
    slurm.add("30_1", state="RUNNING", limit_s=3600, array_job_id="30")
    r = resizer(store, slurm, [900])
    r.on_outcome(outcome())
    r.tick(slurm.queue())
    assert slurm.updates == [("30", {"TimeLimit": "15"})]


def test_refused_update_is_recorded_and_a_started_job_is_not_resized_after_a_crash(store, slurm):
    register(store, "31", original_s=7200, harp_time="60")
    slurm.add("31", state="PENDING", limit_s=3600)
    slurm.update_error = "scontrol update failed (exit 1): Access/permission denied"
    r = resizer(store, slurm, [900])
    r.on_outcome(outcome())
    r.tick(slurm.queue())
    assert store.limit_changes("31")[0].step == "refused"
    # a decided re-size whose job started before harpd came back is not carried out
    register(store, "32", original_s=7200, harp_time="60")
    store.add_limit_change("32", "resize", 3600, 900, "test", "decided")
    slurm.add("32", state="RUNNING", limit_s=3600)
    r.tick(slurm.queue())
    assert store.limit_changes("32")[0].step == "ended" and all(c[0] != "32" for c in slurm.updates)


def test_pending_memory_follows_the_siblings_within_the_request_and_once(store, slurm):
    # harp gave 2000 of the 8000 MB asked at submission; the siblings now say 600 MB
    register(store, "30", original_s=7200, harp_time=None, original_mem_mb=8000, harp_mem="2000M")
    slurm.add("30", state="PENDING", limit_s=7200, mem_mb=2000)
    r = Resizer(
        store,
        slurm,
        settings(resize_min_ratio=0.1, resize_min_s=300),
        lambda sub: Fresh(time_s=None, mem_option="mem", mem_mb=600),
    )
    r.on_outcome(outcome())
    assert r.tick(slurm.queue()) == 1
    assert slurm.jobs["30"].mem_mb == 600 and slurm.updates == [("30", {"MinMemoryNode": "600"})]
    (row,) = store.limit_changes("30")
    assert (row.kind, row.old_mem_mb, row.new_mem_mb, row.step) == ("resize-mem", 2000, 600, "done")
    r.on_outcome(outcome())
    assert r.tick(slurm.queue()) == 0  # already there


def test_pending_memory_never_above_the_request_and_small_steps_are_skipped(store, slurm):
    register(store, "31", original_s=7200, harp_time=None, original_mem_mb=3000, harp_mem="1000M")
    slurm.add("31", state="PENDING", limit_s=7200, mem_mb=1000)
    register(store, "32", original_s=7200, harp_time=None, original_mem_mb=3000, harp_mem="1000M")
    slurm.add("32", state="PENDING", limit_s=7200, mem_mb=1000)
    register(store, "33", original_s=7200, harp_time=None)  # harp did not size its memory
    slurm.add("33", state="PENDING", limit_s=7200, mem_mb=1000)
    want = {"31": 99999, "32": 1040, "33": 200}
    r = Resizer(
        store,
        slurm,
        settings(resize_min_ratio=0.1, resize_min_s=300),
        lambda sub: Fresh(mem_option="mem", mem_mb=want[sub.job_id]),
    )
    r.on_outcome(outcome())
    r.tick(slurm.queue())
    assert slurm.jobs["31"].mem_mb == 3000  # capped by the user's own request
    assert slurm.jobs["32"].mem_mb == 1000  # 40 MB: not worth a change
    assert slurm.jobs["33"].mem_mb == 1000 and store.limit_changes("33") == []


def test_a_memory_resize_refused_by_slurm_is_recorded_and_the_per_cpu_form_is_used(store, slurm):
    register(
        store, "34", original_s=7200, harp_time=None, original_mem_mb=4000, harp_mem="1000M", mem_option="mem-per-cpu"
    )
    slurm.add("34", state="PENDING", limit_s=7200, mem_per_cpu_mb=1000)
    slurm.update_error = "scontrol update JobId=34 failed (exit 1): Access/permission denied"
    r = Resizer(
        store,
        slurm,
        settings(resize_min_ratio=0.1, resize_min_s=300),
        lambda sub: Fresh(mem_option="mem-per-cpu", mem_mb=300),
    )
    r.on_outcome(outcome())
    assert r.tick(slurm.queue()) == 0
    assert slurm.updates == [("34", {"MinMemoryCPU": "300"})]
    (row,) = store.limit_changes("34")
    assert row.kind == "resize-mem-per-cpu" and row.step == "refused" and "permission" in row.reason


def test_a_workflow_task_left_as_asked_at_submission_is_sized_from_its_finished_siblings(store, slurm):
    # nf-core submits a process's samples together: harp kept their 8000 MB (nothing of the type had ended)
    task, program = "wf:nextflow:PIPE:STAR_ALIGN", "sig-a"
    register(store, "40", original_s=7200, harp_time=None, original_mem_mb=8000, signature=task)
    slurm.add("40", state="PENDING", limit_s=7200, mem_mb=8000)
    register(store, "41", original_s=7200, harp_time=None, original_mem_mb=8000, signature=program)
    slurm.add("41", state="PENDING", limit_s=7200, mem_mb=8000)  # not a workflow task: harp did not size it
    register(store, "42", original_s=7200, harp_time=None, original_mem_mb=8000, signature=task, decision=False)
    slurm.add("42", state="PENDING", limit_s=7200, mem_mb=8000)  # no decision (#HARP off): never touched
    r = Resizer(
        store, slurm, settings(resize_min_ratio=0.1, resize_min_s=300), lambda sub: Fresh(mem_option="mem", mem_mb=3000)
    )
    r.on_outcome(outcome(task))
    r.on_outcome(outcome(program))
    assert r.tick(slurm.queue()) == 1
    assert slurm.jobs["40"].mem_mb == 3000 and slurm.updates == [("40", {"MinMemoryNode": "3000"})]
    assert slurm.jobs["41"].mem_mb == slurm.jobs["42"].mem_mb == 8000
    assert store.limit_changes("41") == store.limit_changes("42") == []


def test_a_pending_job_is_re_sized_only_while_slurm_shows_harps_owner_and_limit(store, slurm, caplog):
    register(store, "60", original_s=7200, harp_time="60", uid=1001, user="bob")  # Slurm says alice owns it
    slurm.add("60", state="PENDING", limit_s=3600)
    register(store, "61", original_s=7200, harp_time="60")
    slurm.add("61", state="PENDING", limit_s=5400)  # someone set 90 minutes: not harp's limit any more
    want = [1800]
    r = resizer(store, slurm, want)
    r.on_outcome(outcome())
    r.tick(slurm.queue())
    assert slurm.updates == [] and slurm.jobs["60"].time_limit_s == 3600 and slurm.jobs["61"].time_limit_s == 5400
    assert "job 60: not re-sized: Slurm reports owner uid 1000" in caplog.text
    assert "job 61: not re-sized: its time limit is 5400 s, not the 3600 s harp last set" in caplog.text
