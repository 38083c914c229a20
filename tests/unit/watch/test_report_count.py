"""``harp report`` counts harpd's extensions and re-sizes of the window's jobs."""

from __future__ import annotations

import time

from watch_fakes import store  # noqa: F401 (fixture)

from harpd.config import HarpSettings
from harpd.records import JobRecord, Outcome
from harpd.report import build
from harpd.report.render_table import render as render_table


def test_report_counts_extensions_of_jobs_in_the_window(store):
    now = time.time()
    store.insert_jobs(
        [
            JobRecord(
                job_id=str(i),
                source="slurm",
                user="alice",
                partition="short",
                outcome=Outcome.COMPLETED,
                submit_time=now - 900,
                start_time=now - 800,
                end_time=now - 600,
                req_time_s=240.0,
                used_time_s=200.0,
                req_cpus=1,
                alloc_cpus=1,
                harp_sized=True,
            )
            for i in (1, 2, 3)
        ]
    )
    store.add_limit_change("1", "extend", 60, 120, "t", "done")
    store.add_limit_change("1", "extend", 120, 240, "t", "done")
    store.add_limit_change("2", "extend", 60, 120, "t", "refused")  # not made: not counted
    store.add_limit_change("3", "resize", 600, 240, "t", "done")
    store.add_limit_change("99", "extend", 60, 120, "t", "done")  # a job outside the window
    settings = HarpSettings()
    report = build.build(
        store, settings, by="user", window=build.window_of(settings, "all", None), user=None, source="test"
    )
    rs = report.resubmissions
    assert (rs["extensions"], rs["jobs_extended"], rs["resized"]) == (2, 1, 1)
    assert "soft limits: 2 extension(s) of 1 running job(s) before their limit, 1 pending job(s) re-sized" in (
        render_table(report)
    )
