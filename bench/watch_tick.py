"""The watcher's tick with thousands of jobs in the queue, one of them with a newline in its comment.

#44: one user's ``scontrol update comment=$'a\\nb'`` made harpd read every
job in slurmctld one at a time on every tick (213 jobs: 0.1 s -> 9-14 s),
and around 2,500 jobs a tick outlasted the watcher's lead, so extensions
came too late.  Now the listing is one ``squeue --json`` call, and a user's
text is a string inside its field.

This bench runs harpd's real ``Watch.tick`` over the real ``CliBackend``,
whose ``squeue`` is a stand-in printing a 22.05-shaped JSON document of
``--jobs`` jobs (built from the recorded fixture, one with a comment holding
line breaks and a made-up record), with ``--registered`` of them registered
in a fresh store as harp-sized jobs (the extender and re-sizer look at each).
The figure: the slowest of ``--ticks`` ticks as a share of the lead
(``watch.margin_s``, 120 s by default); target under 10%.  The same queue
through the text fallback (a Slurm without JSON) is printed for comparison.

    python bench/watch_tick.py [--jobs 5000] [--registered 1000] [--ticks 5]
    python bench/watch_tick.py --real 213    the same on the local cluster (SLURM_CONF): 213 held jobs
                                             submitted, one with a line break in its comment, then cancelled
"""
# bench: timeout=900

from __future__ import annotations

import argparse
import copy
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from harpd.config import HarpSettings  # noqa: E402
from harpd.protocol import Decision  # noqa: E402
from harpd.records import Resources  # noqa: E402
from harpd.slurm.cli_backend import CliBackend  # noqa: E402
from harpd.store import Store  # noqa: E402
from harpd.watch.service import Watch  # noqa: E402

FIXTURE = REPO / "tests" / "fixtures" / "squeue" / "22.05-jobs.json"
TARGET_SHARE = 0.10
EVIL = "x\nJobId=3 UserId=root(0) TimeLimit=UNLIMITED|harp retry 2 of 1\nJobId=4 JobState=RUNNING"

SQUEUE = """#!{python}
import os, sys
here = os.path.dirname(os.path.abspath(__file__))
if "--json" in sys.argv and not os.path.exists(os.path.join(here, "no_json")):
    sys.stdout.write(open(os.path.join(here, "squeue.json")).read())
elif "--json" in sys.argv:
    sys.stderr.write("squeue: unrecognized option '--json'\\n"); sys.exit(1)
else:
    sys.stdout.write(open(os.path.join(here, "squeue.ids")).read())
"""
SCONTROL = """#!{python}
import os, sys
here = os.path.dirname(os.path.abspath(__file__))
if sys.argv[1:3] == ["show", "job"]:
    sys.stdout.write(open(os.path.join(here, "scontrol.job")).read())
"""


def queue(n: int, now: float) -> tuple[dict, str, str]:
    """(squeue's JSON, squeue -o %A's ids, scontrol show job -o's text) of ``n`` jobs, job 1 with EVIL's comment."""
    doc = json.loads(FIXTURE.read_text())
    template = next(j for j in doc["jobs"] if j["job_state"] == "RUNNING")
    jobs, lines = [], []
    for i in range(1, n + 1):
        j = copy.deepcopy(template)
        running = i % 3 != 0
        uid = 1000 + i % 50
        j.update(
            job_id=i,
            user_id=uid,
            user_name=f"user{i % 50}",
            name=f"job{i}",
            comment=EVIL if i == 1 else f"harp decision t{i}",
            job_state="RUNNING" if running else "PENDING",
            time_limit=60,
            start_time=int(now - 600) if running else 0,
            end_time=int(now + 3000) if running else 0,
            submit_time=int(now - 900),
        )
        jobs.append(j)
        comment = j["comment"]
        lines.append(
            f"JobId={i} JobName=job{i} UserId=user{i % 50}({uid}) GroupId=g(1) JobState={j['job_state']} "
            f"Reason=None TimeLimit=01:00:00 RunTime={'00:10:00' if running else '00:00:00'} "
            f"SubmitTime=2026-11-24T08:11:40 Partition=short MinMemoryNode=100M Comment={comment}"
        )
    ids = "".join(f"{i}\n" for i in range(1, n + 1))
    return {**doc, "jobs": jobs}, ids, "\n".join(lines) + "\n"


def register(store: Store, n: int, registered: int) -> None:
    """``registered`` jobs (every n // registered-th) as harp-submit registers a job harp cut."""
    step = max(1, n // registered)
    for i in range(1, n + 1, step):
        res = {"time_s": 3600, "mem_mb": 100, "partition": "short"}
        decision = {"changes": [{"option": "time", "value": "1:00:00", "old": "4:00:00"}], "limits": {}}
        store.add_submission(
            str(i),
            1000 + i % 50,
            f"user{i % 50}",
            {"job_name": f"job{i}", "signature": "sig:bench", "partition": "short"},
            Resources.model_validate({**res, "time_s": 14400}),
            Resources.model_validate(res),
            Decision.model_validate(decision),
            verified=True,
        )


def ticks(watch: Watch, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        watch.tick()
        out.append(time.perf_counter() - t0)
    return out


def real(n: int, n_ticks: int) -> int:
    """``n`` held jobs on the local cluster (one with a newline comment): the real squeue, the real tick."""
    if not os.environ.get("SLURM_CONF"):
        print("watch_tick --real: set SLURM_CONF to the local cluster's (bash scripts/localslurm env)", file=sys.stderr)
        print(f"FIGURE watch_tick_real_share_of_lead: nan % (target < {TARGET_SHARE * 100:g}) FAIL")
        return 1
    ids = []
    try:
        for i in range(n):
            comment = [f"--comment={EVIL}"] if i == 0 else []
            out = subprocess.run(
                ["sbatch", "--parsable", "-H", "-o", "/dev/null", *comment, "--wrap", "true"],
                capture_output=True,
                text=True,
                check=True,
            )
            ids.append(out.stdout.strip().split(";")[0])
        with tempfile.TemporaryDirectory(prefix="harp-watch-tick-") as tmp:
            settings = HarpSettings()
            store = Store.open(Path(tmp) / "harp.db")
            watch = Watch(store, CliBackend(settings), settings, predictor=None, partitions=lambda: {})
            took = ticks(watch, n_ticks)
            listed = watch.last_tick_jobs
            store.close()
    finally:
        for i in range(0, len(ids), 200):
            subprocess.run(["scancel", *ids[i : i + 200]], capture_output=True)
    share = max(took) / watch.lead_s
    print(f"{n} held jobs on the cluster, one with a newline comment; the tick listed {listed} jobs")
    print(f"tick with squeue --json: worst {max(took):.2f} s of {len(took)}")
    verdict = "PASS" if share < TARGET_SHARE else "FAIL"
    print(f"FIGURE watch_tick_real_share_of_lead: {share * 100:.2f} % (target < {TARGET_SHARE * 100:g}) {verdict}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=5000)
    ap.add_argument("--registered", type=int, default=1000)
    ap.add_argument("--ticks", type=int, default=5)
    ap.add_argument("--real", type=int, default=0, metavar="N", help="N jobs on the local cluster instead")
    a = ap.parse_args()
    logging.basicConfig(level=logging.ERROR)
    if a.real:
        return real(a.real, a.ticks)
    with tempfile.TemporaryDirectory(prefix="harp-watch-tick-") as tmp:
        d = Path(tmp)
        bindir = d / "bin"
        bindir.mkdir()
        for name, text in (("squeue", SQUEUE), ("scontrol", SCONTROL)):
            (bindir / name).write_text(text.format(python=sys.executable))
            (bindir / name).chmod(0o755)
        doc, ids, text = queue(a.jobs, time.time())
        (bindir / "squeue.json").write_text(json.dumps(doc))
        (bindir / "squeue.ids").write_text(ids)
        (bindir / "scontrol.job").write_text(text)
        settings = HarpSettings(slurm={"bin_dir": str(bindir), "command_timeout_s": 120})
        store = Store.open(d / "harp.db")
        register(store, a.jobs, a.registered)
        backend = CliBackend(settings)
        watch = Watch(store, backend, settings, predictor=None, partitions=lambda: {})
        lead = watch.lead_s
        json_s = ticks(watch, a.ticks)
        listed = len(backend.queue())
        (bindir / "no_json").touch()
        text_backend = CliBackend(settings)
        text_watch = Watch(store, text_backend, settings, predictor=None, partitions=lambda: {})
        text_s = ticks(text_watch, max(1, a.ticks // 2))
        text_listed = len(text_backend.queue())
        store.close()
    worst = max(json_s)
    print(
        f"{a.jobs} jobs in the queue ({a.registered} registered), job 1's comment holds line breaks and a "
        f"made-up record: squeue --json lists {listed} (running and pending); scontrol's text {text_listed}"
    )
    print(f"tick with squeue --json: median {sorted(json_s)[len(json_s) // 2]:.2f} s, worst {worst:.2f} s")
    print(f"tick through the text fallback (a Slurm without JSON): worst {max(text_s):.2f} s")
    share = worst / lead
    verdict = "PASS" if share < TARGET_SHARE else "FAIL"
    print(f"FIGURE watch_tick_share_of_lead: {share * 100:.2f} % (target < {TARGET_SHARE * 100:g}) {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
