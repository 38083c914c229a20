"""Pending CPUs re-sized at start, as memory is, on the real cluster.

A script whose job step harp cannot see (``bash hidden_step.sh`` running
``srun -c 2``) asks 2 CPUs; its history says it keeps a third of a core
busy, so harp lowers it to 1.  Two runs are submitted: A starts at once, B
waits (``--begin``), both cut to 1.  A fails ("More processors requested
than permitted"; on 25.11 and 26.05 its step waits for CPUs until A times
out), which restores the script's CPUs for good; the next
outcome of the script makes harpd's watcher re-decide the pending B, which
gets its 2 CPUs back (``CPUsPerTask``, ``NumCPUs``) before it starts, and
completes.
"""

from __future__ import annotations

import pytest

from harp_submit import client
from tests.helpers.harpd_process import running_harpd
from tests.helpers.processes import run_harp_submit, short_tmpdir
from tests.helpers.slurm_jobs import scontrol_fields, wait_finished
from tests.helpers.wait import wait_for
from tests.slurm.test_snakemake_workflow import _wait_outcomes
from tests.slurm.test_workflow_cpus import SCRIPT, STARVED_WAIT_S, _script_signature, _seed, _submit

pytestmark = pytest.mark.slurm

WATCH = "[watch]\ninterval_s = 2\nresize_min_s = 60\n"


def test_a_pending_job_gets_back_the_cpus_its_failed_sibling_restored(slurm_cluster) -> None:
    c = slurm_cluster
    text = SCRIPT.format(cpus=2, body="bash hidden_step2.sh")
    (c.workdir / "hidden_step2.sh").write_text("srun -c 2 python3 -c 'print(40)'\n")
    (c.workdir / "hidden2.sh").write_text(text)
    jobs: list[str] = []
    with short_tmpdir("hrc-") as d:
        (d / "lib").mkdir()
        _seed(d / "lib" / "harp.db", _script_signature(text, "hidden2.sh"), 2)
        with running_harpd(d, slurm_conf=c.conf, poll_interval_s=2, timeout_s=90, extra_toml=WATCH) as sock:
            try:
                a, err = _submit(c, sock, "hidden2.sh")
                jobs.append(a)
                b, _ = _submit(c, sock, "hidden2.sh", "--begin=now+1200")  # waits past A, which may run its 5 minutes
                jobs.append(b)
                cpus = [scontrol_fields(c, j)["CPUs/Task"] for j in (a, b)]
                assert cpus == ["1", "1"], err  # both cut
                assert wait_finished(c, a, timeout=STARVED_WAIT_S) == c.starved_step_end()
                _wait_outcomes(sock, [a])

                def restored() -> bool:
                    client.call(sock, {"op": "reload"}, 60.0)
                    proc = run_harp_submit(
                        c,
                        "--harp-dry-run",
                        "--harp-explain",
                        "hidden2.sh",
                        socket_path=sock,
                        env={"HARP_TIMEOUT": "30"},
                    )
                    return "failed after harp lowered its CPUs" in proc.stderr

                wait_for("the restored CPUs", restored, 120, interval=1)
                # B may already be re-sized here (the failure's outcome is itself a sibling's outcome);
                # what matters is that it gets its 2 CPUs while it waits, checked below
                assert scontrol_fields(c, b)["JobState"] == "PENDING"
                # the script's next outcome: the watcher re-decides its pending sibling B
                third, _ = _submit(c, sock, "hidden2.sh")
                jobs.append(third)
                assert scontrol_fields(c, third)["CPUs/Task"] == "2"
                assert wait_finished(c, third) == "COMPLETED"
                try:
                    wait_for(
                        "B re-sized while pending",
                        lambda: scontrol_fields(c, b).get("CPUs/Task") == "2",
                        120,
                        interval=1,
                    )
                except AssertionError:
                    log = (d / "harpd.log").read_text(errors="replace").splitlines()
                    raise AssertionError(
                        "B not re-sized; harpd's log:\n"
                        + "\n".join(ln for ln in log if "watch" in ln or f"job {b}" in ln or "resiz" in ln)[-4000:]
                    ) from None
                info = scontrol_fields(c, b)
                assert info["JobState"] == "PENDING" and info["NumCPUs"] == "2", info
                st = client.call(sock, {"op": "status", "job_id": b}, 10.0)["job"]
                print(f"\njob {b}: {info['CPUs/Task']} CPUs/task while pending; harpd: {st.get('limit_changes')}")
                c.run(["scontrol", "update", f"jobid={b}", "StartTime=now"])
                assert wait_finished(c, b) == "COMPLETED"
                assert (c.workdir / f"hidden2.sh-{b}.out").read_text().strip().endswith("40")
            finally:
                for j in jobs:
                    c.run(["scancel", j], check=False)
