"""``harp status`` prints the limits ledger and what each attempt really ran with, from Slurm (#45 D)."""

from __future__ import annotations

import time

from watch_fakes import register, store  # noqa: F401 (fixture)

from harpd import protocol as p
from harpd.cli.status_cmd import render
from harpd.config import HarpSettings
from harpd.daemon.handlers import Handlers, Peer
from harpd.records import JobRecord, Outcome
from harpd.report.status_view import JobStatus
from harpd.store import Resize


def test_status_of_the_shrunk_job_shows_who_set_each_limit_and_the_541M_it_ran_with(store):
    register(store, "53", original_s=600, harp_time="3", original_mem_mb=2000, harp_mem="541M")
    store.add_attempt("53", 1, "53", {"time_s": 180, "mem_mb": 541}, "first run", "done")
    store.add_attempt("53", 2, "53", {"time_s": 180, "mem_mb": 1082, "escalated": "mem"}, "ran out of mem: 2x", "done")
    store.add_attempt("53", 3, "53", {"time_s": 180, "mem_mb": 2000, "escalated": "mem"}, "ran out of mem: req", "done")
    store.add_limit_change(
        "53", "resize-mem", 180, 180, "re-decided while pending", "done", mem=Resize(2000, 541), attempt=3
    )
    now = time.time()
    store.insert_jobs(
        [
            JobRecord(
                job_id="53",
                user="alice",
                attempt=a,
                outcome=Outcome.OOM,
                state="OUT_OF_MEMORY",
                req_mem_mb=mb,
                req_time_s=180,
                submit_time=now - 100 + a,
                end_time=now - 90 + a,
            )
            for a, mb in ((1, 541), (2, 1082), (3, 541))
        ]
    )
    h = Handlers(store, HarpSettings(), admin_gid=None)
    job = h.handle(
        Peer(pid=1, uid=0, gid=0, user="root", groups=frozenset()), p.StatusRequest(op="status", job_id="53")
    ).job
    hands = [(e["attempt"], e["hand"], e["resource"], e["value"]) for e in job["ledger"] if e["resource"] == "mem"]
    assert hands == [
        (1, "decision", "mem", 541),
        (2, "escalation", "mem", 1082),
        (3, "escalation", "mem", 2000),
        (3, "re-size", "mem", 541),
    ]
    text = render(JobStatus.from_json(job))
    assert "ran with:      #3  mem 541M  time 3 min  oom (Slurm OUT_OF_MEMORY)" in text, text
    assert "escalation   mem  1082M -> 2000M  (ran out of mem: req)" in text, text
    assert "last outcome:  oom (Slurm OUT_OF_MEMORY)" in text and "RUNNING" not in text
