"""A job's own text never passes for Slurm's fields, on the real cluster (#26, #44).

A job's name and comment are written by its user, and Slurm's text output
prints them unquoted, line breaks included, so an ordinary user can write
``UserId=root(0)`` or a whole made-up record of another job into them.
harpd reads jobs from ``squeue --json`` (``harpd.slurm.squeue_json``), where
each text is a string inside its own field: every reader gives back exactly
the jobs Slurm has, with exactly their text.  Without JSON (a Slurm built
without it) the text reader refuses such a record (``AmbiguousRecord``:
harp leaves that job alone) and still reads every other job in one call.
"""

from __future__ import annotations

import pytest

from harpd.config import HarpSettings
from harpd.slurm.cli_backend import CliBackend
from harpd.slurm.scontrol import AmbiguousRecord
from tests.helpers.users import ensure_user

pytestmark = pytest.mark.slurm

A, B = "harptest1", "harptest2"

#: what B writes into names and comments (#44's list; sbatch itself refuses a comment of 4,000 characters)
HOSTILE = {
    "owner in the name": ("a UserId=root(0)", None),
    "limit in the comment": ("n", "x TimeLimit=UNLIMITED"),
    "line break and a made-up record": ("a UserId=root(0) JobState=RUNNING TimeLimit=UNLIMITED\nb", None),
    "another job's marker after a line break": ("n", "x\n{victim}|harp retry 2 of 1"),
    "carriage return, bar, semicolon, equals": ("r\r|;=JobId=1", "c\r|;=UserId=root(0)"),
    "unicode": ("é漢字🙂", "коммент 🙂"),
    "long": ("n", "y" * 1000),
}


def test_every_reader_gives_back_exactly_the_jobs_slurm_has(slurm_cluster) -> None:
    c = slurm_cluster
    for user in (A, B):
        ensure_user(user)
    backend = CliBackend(HarpSettings())
    victim = c.sbatch("--hold", "-t", "3", "--comment=harp retry 2 of 1", "--wrap", "sleep 1", user=A)
    made: dict[str, tuple[str, str, str | None]] = {}
    try:
        for what, (name, comment) in HOSTILE.items():
            opts = ["--hold", "-t", "5", "-J", name]
            if comment is not None:
                comment = comment.format(victim=victim)
                opts.append(f"--comment={comment}")
            made[what] = (c.sbatch(*opts, "--wrap", "sleep 1", user=B), name, comment)
        listing = {j.job_id: j for j in backend.held_jobs()}
        v = backend.show_job(victim)
        assert (v.user, v.time_limit_s, v.comment) == (A, 180, "harp retry 2 of 1")
        assert (listing[victim].user, listing[victim].time_limit_s) == (A, 180)
        for what, (jid, name, comment) in made.items():
            info = backend.show_job(jid)
            assert (info.user, info.time_limit_s, info.name, info.comment) == (B, 300, name, comment), what
            q = listing[jid]
            assert (q.user, q.time_limit_s, q.comment) == (B, 300, comment), what
        assert {j.job_id for j in listing.values() if j.user == B} >= {m[0] for m in made.values()}
        # the search recovery adopts by: A's job carries the marker; B's made-up line does not count for it
        ours = {victim, *(m[0] for m in made.values())}  # jobs of earlier runs may carry the marker too
        assert set(backend.jobs_with_comment("harp retry 2 of 1", A, None)) & ours == {victim}
        assert set(backend.jobs_with_comment("harp retry 2 of 1", B, None)) & ours == set()
    finally:
        c.run(["scancel", victim, *(m[0] for m in made.values())], check=False)


def test_without_json_a_record_that_reads_as_slurms_is_left_alone(slurm_cluster) -> None:
    c = slurm_cluster
    ensure_user(B)
    backend = CliBackend(HarpSettings())
    backend._squeue_json_ok = False  # a Slurm without squeue --json: scontrol's text, checked
    plain = c.sbatch("--hold", "-t", "3", "--wrap", "sleep 1", user=B)
    forged = {
        what: c.sbatch("--hold", "-t", "3", "-J", name, *([f"--comment={cm}"] if cm else []), "--wrap", "x", user=B)
        for what, (name, cm) in HOSTILE.items()
        if what in ("owner in the name", "limit in the comment", "line break and a made-up record")
    }
    try:
        job = backend.show_job(plain)
        assert job.user == B and job.time_limit_s == 180
        for jid in forged.values():
            with pytest.raises(AmbiguousRecord, match="harp leaves this job alone"):
                backend.show_job(jid)
        listing = {j.job_id: j for j in backend.held_jobs()}
        assert listing[plain].user == B and listing[plain].time_limit_s == 180
        for jid in forged.values():
            assert jid not in listing or (listing[jid].user == B and listing[jid].time_limit_s == 180)
        assert not any(j.uid == 0 and j.job_id in forged.values() for j in listing.values())
    finally:
        c.run(["scancel", plain, *forged.values()], check=False)
