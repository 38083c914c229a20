"""A job's own text never passes for Slurm's fields, on the real cluster.

scontrol prints a job's name and comment unquoted, newlines included, so an
ordinary user can write ``UserId=root(0)`` or a whole made-up record into
them.  harpd reads owners, limits and ids from scontrol as root, so the
Slurm backend refuses such a record (``AmbiguousRecord``: harp leaves the
job alone) and reads a listing that holds one job by job.
"""

from __future__ import annotations

import pytest

from harpd.config import HarpSettings
from harpd.slurm.cli_backend import CliBackend
from harpd.slurm.scontrol import AmbiguousRecord
from tests.helpers.users import ensure_user

pytestmark = pytest.mark.slurm

USER = "harptest1"


def test_a_users_name_and_comment_never_pass_for_slurms_fields(slurm_cluster) -> None:
    c = slurm_cluster
    ensure_user(USER)
    backend = CliBackend(HarpSettings())
    plain = c.sbatch("--hold", "-t", "3", "--wrap", "sleep 1", user=USER)
    forged = {
        "owner in the name": c.sbatch("--hold", "-t", "3", "-J", "a UserId=root(0)", "--wrap", "sleep 1", user=USER),
        "limit in the comment": c.sbatch(
            "--hold", "-t", "3", "--comment=x TimeLimit=UNLIMITED", "--wrap", "sleep 1", user=USER
        ),
        # the name ends the line with a made-up record; slurmctld's own goes on in the next line
        "line break": c.sbatch(
            "--hold",
            "-t",
            "3",
            "-J",
            "a UserId=root(0) JobState=RUNNING TimeLimit=UNLIMITED\nb",
            "--wrap",
            "sleep 1",
            user=USER,
        ),
    }
    try:
        job = backend.show_job(plain)
        assert job.user == USER and job.time_limit_s == 180
        for jid in forged.values():
            with pytest.raises(AmbiguousRecord, match="harp leaves this job alone"):
                backend.show_job(jid)
        listing = {j.job_id: j for j in backend.held_jobs()}
        assert listing[plain].user == USER and listing[plain].time_limit_s == 180
        for jid in forged.values():
            assert jid not in listing or (listing[jid].user == USER and listing[jid].time_limit_s == 180)
        assert not any(j.uid == 0 and j.job_id in forged.values() for j in listing.values())
    finally:
        c.run(["scancel", plain, *forged.values()], check=False)
