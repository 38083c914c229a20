"""CliBackend against fake Slurm commands: argv lists, errors, fallback, parsing."""

from __future__ import annotations

import json
import os
import stat
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest
from ingest_helpers import FIXTURES

from harpd.config import HarpSettings
from harpd.records import Outcome
from harpd.slurm import get_backend
from harpd.slurm.base import SlurmBackend, SlurmError
from harpd.slurm.cli_backend import CliBackend
from harpd.slurm.scontrol import AmbiguousRecord, job_record, parse_kv_line

FAKE = textwrap.dedent(
    """\
    #!{python}
    # fake {name}: logs its call, answers from files in its directory
    import json, os, sys, time
    here = os.path.dirname(os.path.abspath(__file__))
    name = os.path.basename(__file__)
    data = sys.stdin.buffer.read() if name == "sbatch" else b""
    with open(os.path.join(here, "calls.jsonl"), "a") as fh:
        fh.write(json.dumps({{"cmd": name, "argv": sys.argv[1:], "uid": os.getuid(), "cwd": os.getcwd(),
                            "stdin": data.decode(), "tf": os.environ.get("SLURM_TIME_FORMAT"),
                            "conf": os.environ.get("SLURM_CONF"), "home": os.environ.get("HOME")}}) + "\\n")
    def answer(key):
        p = os.path.join(here, key)
        return open(p).read() if os.path.exists(p) else None
    if os.path.exists(os.path.join(here, "slow")):
        time.sleep(10)
    if os.path.exists(os.path.join(here, "down")):
        sys.stderr.write("sacct: error: Problem talking to the database: Connection refused\\nmore\\n")
        sys.exit(1)
    if name == "sacct":
        if "--json" in sys.argv:
            if os.path.exists(os.path.join(here, "no_json")):
                sys.stderr.write("sacct: unrecognized option '--json'\\n")
                sys.exit(1)
            sys.stdout.write(answer("sacct.json"))
        else:
            sys.stdout.write(answer("sacct.psv"))
    elif name == "sbatch":
        sys.stdout.write(answer("sbatch.out") or "4242;harptest\\n")
    elif name == "squeue" and "--json" in sys.argv:
        if os.path.exists(os.path.join(here, "no_squeue_json")):
            sys.stderr.write("squeue: unrecognized option '--json'\\n")
            sys.exit(1)
        sys.stdout.write(answer("squeue.json") or '{{"jobs": [], "errors": []}}')
    elif name == "squeue" and "%k" in sys.argv:  # one job's comment, whole
        sys.stdout.write(answer("squeue.comment." + sys.argv[sys.argv.index("-j") + 1]) or "\\n")
    elif name == "squeue":  # slurmctld's records, one job id a line (squeue -o %A holds no user text)
        ids = (answer("squeue.ids") or "").split()
        if "-j" in sys.argv:
            ids = [i for i in ids if i == sys.argv[sys.argv.index("-j") + 1]]
        sys.stdout.write("".join(i + "\\n" for i in ids))
    elif name == "scontrol":
        key = "scontrol." + sys.argv[2] if len(sys.argv) > 2 and sys.argv[1] == "show" else None
        if key and len(sys.argv) > 4 and answer(key + "." + sys.argv[4]) is not None:
            key += "." + sys.argv[4]  # one job's own answer
        out = answer(key) if key else ""
        if key and out is None:
            sys.stderr.write("slurm_load_jobs error: Invalid job id specified\\n")
            sys.exit(1)
        sys.stdout.write(out or "")
    """
)

PARTITIONS = (
    "PartitionName=short AllowGroups=ALL Default=YES MaxNodes=UNLIMITED MaxTime=01:00:00 Nodes=n[1-2] "
    "TotalCPUs=4 TotalNodes=2 DefMemPerNode=UNLIMITED MaxMemPerNode=6000 MaxCPUsPerNode=UNLIMITED "
    "TRES=cpu=4,mem=16000M,node=2,billing=4\n"
    "PartitionName=gpu AllowGroups=ALL Default=NO MaxNodes=4 MaxTime=2-00:00:00 Nodes=g1 TotalCPUs=8 "
    "TotalNodes=1 MaxMemPerNode=UNLIMITED MaxCPUsPerNode=6\n"
    "PartitionName=open Default=NO MaxTime=UNLIMITED Nodes=n1 TotalNodes=1 MaxMemPerNode=UNLIMITED\n"
)
NODES = (
    "NodeName=n1 Arch=x86_64 CoresPerSocket=2 CPUAlloc=0 CPUTot=2 RealMemory=8000 MemSpecLimit=500 "
    "Gres=(null) Partitions=short,open State=IDLE\n"
    "NodeName=n2 CPUTot=2 RealMemory=8000 Gres=(null) Partitions=short State=IDLE\n"
    "NodeName=g1 CPUTot=8 RealMemory=64000 Gres=gpu:a100:4(S:0-1) Partitions=gpu State=MIXED "
    "Reason=being fixed by admin [root@2026]\n"
)


def make_bin(d: Path, python: str = sys.executable) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    for name in ("sbatch", "sacct", "scontrol", "scancel", "squeue"):
        p = d / name
        p.write_text(FAKE.format(python=python, name=name))
        p.chmod(0o755)
    (d / "sacct.json").write_text((FIXTURES / "22.05-jobs.json").read_text())
    (d / "sacct.psv").write_text((FIXTURES / "22.05-jobs-epoch.psv").read_text())
    (d / "scontrol.partition").write_text(PARTITIONS)
    (d / "scontrol.node").write_text(NODES)
    (d / "scontrol.job").write_text(
        "JobId=12 JobName=my job UserId=alice(1000) GroupId=alice(1000) JobState=COMPLETED Reason=None "
        "TimeLimit=00:02:00 StartTime=2026-11-24T08:11:40 EndTime=2026-11-24T08:13:03 "
        "TRES=cpu=1,mem=100M,node=1,billing=1 Command=/home/alice/run me.sh WorkDir=/home/alice\n"
    )
    (d / "squeue.ids").write_text("12\n")
    (d / "squeue.json").write_text((FIXTURES.parent / "squeue" / "22.05-jobs.json").read_text())
    return d


def calls(d: Path) -> list[dict]:
    p = d / "calls.jsonl"
    return [json.loads(x) for x in p.read_text().splitlines()] if p.exists() else []


@pytest.fixture
def bindir(tmp_path):
    return make_bin(tmp_path / "bin")


@pytest.fixture
def backend(bindir):
    return CliBackend(HarpSettings(slurm={"bin_dir": str(bindir), "command_timeout_s": 60, "cluster": "clusterA"}))


def test_is_a_slurm_backend(backend):
    assert isinstance(backend, SlurmBackend)


# ----------------------------------------------------------------- sacct


def test_sacct_json_argv_and_records(backend, bindir):
    recs = backend.sacct_jobs(["7", "8", "12"], None, None, True)
    (call,) = calls(bindir)
    assert call["cmd"] == "sacct"
    assert call["argv"][0] == "--json"
    assert "--duplicates" in call["argv"] and "--allusers" in call["argv"]
    assert call["argv"][call["argv"].index("--jobs") + 1] == "7,8,12"
    by_id = {r.job_id: r for r in recs}
    assert by_id["8"].outcome is Outcome.TIMEOUT and by_id["9"].outcome is Outcome.OOM
    assert all(r.source == "clusterA" for r in recs)  # slurm.cluster names the source


def test_sacct_window_argv(backend, bindir):
    backend.sacct_jobs(None, 1_700_000_000.0, 1_700_003_600.0, False)
    argv = calls(bindir)[0]["argv"]
    assert "--allusers" not in argv and "--jobs" not in argv
    import time as _t

    assert argv[argv.index("--starttime") + 1] == _t.strftime("%Y-%m-%dT%H:%M:%S", _t.localtime(1_700_000_000))
    assert argv[argv.index("--endtime") + 1] == _t.strftime("%Y-%m-%dT%H:%M:%S", _t.localtime(1_700_003_600))


def test_sacct_needs_ids_or_start(backend):
    with pytest.raises(SlurmError, match="job ids or a start time"):
        backend.sacct_jobs(None, None, None, True)


def test_no_json_falls_back_to_parsable2_and_remembers(backend, bindir):
    (bindir / "no_json").touch()
    recs = backend.sacct_jobs(["7"], None, None, True)
    assert {r.job_id: r.outcome for r in recs}["10"] is Outcome.FAILED
    backend.sacct_jobs(["7"], None, None, True)
    seen = calls(bindir)
    assert [("--json" in c["argv"]) for c in seen] == [True, False, False]
    p_call = seen[1]
    assert "--parsable2" in p_call["argv"] and p_call["tf"] == "%s"  # epoch timestamps
    fmt = p_call["argv"][p_call["argv"].index("--format") + 1].split(",")
    assert fmt[:2] == ["JobID", "JobIDRaw"] and "State" in fmt
    assert "JobName" not in fmt and "Comment" not in fmt  # users' text is never split by lines and '|'


def test_unparseable_json_falls_back(backend, bindir):
    (bindir / "sacct.json").write_text("this is not json")
    recs = backend.sacct_jobs(["7"], None, None, True)
    assert len(recs) == 12


def test_slurmdbd_down_is_one_clear_line(backend, bindir):
    (bindir / "down").touch()
    with pytest.raises(SlurmError) as ei:
        backend.sacct_jobs(["7"], None, None, True)
    msg = str(ei.value)
    assert "\n" not in msg
    assert "sacct" in msg and "exit 1" in msg and "Problem talking to the database: Connection refused" in msg
    assert backend._json_ok is None  # not mistaken for "no JSON support"


def test_timeout(bindir):
    b = CliBackend(HarpSettings(slurm={"bin_dir": str(bindir), "command_timeout_s": 0.5}))
    (bindir / "slow").touch()
    with pytest.raises(SlurmError, match=r"no answer within 0.5 s \(slurm.command_timeout_s\)"):
        b.show_job("12")


def test_missing_command(tmp_path):
    b = CliBackend(HarpSettings(slurm={"bin_dir": str(tmp_path)}))
    with pytest.raises(SlurmError, match=r"sacct not found in slurm.bin_dir"):
        b.sacct_jobs(["1"], None, None, True)


def test_bad_job_id_runs_nothing(backend, bindir):
    for bad in ("1;rm -rf /", "--all", "", "12.batch", "abc"):
        with pytest.raises(SlurmError, match="invalid job id"):
            backend.sacct_jobs([bad], None, None, True)
        with pytest.raises(SlurmError, match="invalid job id"):
            backend.cancel(bad)
    assert calls(bindir) == []


# ---------------------------------------------------------------- sbatch


def test_submit_script_on_stdin(backend, bindir, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    jid = backend.submit(
        ["--time=5", "--job-name=a b;c"],
        b"#!/bin/bash\necho hi\n",
        str(work),
        {"HOME": "/home/alice", "PATH": "/usr/bin"},
    )
    assert jid == "4242"
    (call,) = calls(bindir)
    assert call["argv"] == ["--parsable", "--time=5", "--job-name=a b;c"]
    assert call["stdin"] == "#!/bin/bash\necho hi\n"
    assert call["cwd"] == str(work) and call["home"] == "/home/alice"


def test_submit_keeps_harpd_slurm_conf(backend, bindir, tmp_path, monkeypatch):
    monkeypatch.setenv("SLURM_CONF", "/etc/slurm/test.conf")
    backend.submit(["x.sh"], None, str(tmp_path), {"HOME": "/root"})
    assert calls(bindir)[0]["conf"] == "/etc/slurm/test.conf"
    backend.submit(["x.sh"], None, str(tmp_path), {"HOME": "/root", "SLURM_CONF": "/mine.conf"})
    assert calls(bindir)[1]["conf"] == "/mine.conf"


def test_submit_rejects_odd_output(backend, bindir, tmp_path):
    (bindir / "sbatch.out").write_text("Submitted batch job 12\n")
    with pytest.raises(SlurmError, match="not a job id"):
        backend.submit(["x.sh"], None, str(tmp_path), None)


def test_submit_missing_cwd(backend, tmp_path):
    with pytest.raises(SlurmError, match="does not exist"):
        backend.submit(["x.sh"], None, str(tmp_path / "nope"), None)


@pytest.mark.skipif(os.geteuid() != 0, reason="dropping to another uid needs root")
@pytest.mark.skipif(not os.access("/usr/bin/python3", os.X_OK), reason="needs a system python nobody can run")
def test_submit_as_uid_drops_privileges():
    d = Path(tempfile.mkdtemp(prefix="harp-fake-slurm-"))
    try:
        d.chmod(0o777)
        make_bin(d / "bin", python="/usr/bin/python3")
        (d / "bin").chmod(0o777)
        for f in (d / "bin").iterdir():
            f.chmod(0o777 if f.is_dir() else (f.stat().st_mode | stat.S_IROTH | stat.S_IWOTH))
        b = CliBackend(HarpSettings(slurm={"bin_dir": str(d / "bin")}))
        assert b.submit(["x.sh"], None, str(d), {"HOME": "/"}, as_uid=65534) == "4242"
        assert calls(d / "bin")[0]["uid"] == 65534
    finally:
        import shutil

        shutil.rmtree(d, ignore_errors=True)


# -------------------------------------------------------------- scontrol


def test_partitions(backend):
    parts = backend.partitions()
    assert set(parts) == {"short", "gpu", "open"}
    short = parts["short"]
    assert short.max_time_s == 3600 and short.default and short.nodes == 2
    assert short.max_mem_mb_per_node == 6000  # MaxMemPerNode below RealMemory
    assert short.max_cpus_per_node == 2 and short.gres is None and short.gpus_per_node == 0
    gpu = parts["gpu"]
    assert gpu.max_time_s == 2 * 86400 and gpu.max_cpus_per_node == 6 and gpu.max_nodes == 4
    assert gpu.gres == "gpu:a100:4" and gpu.gpus_per_node == 4 and gpu.max_mem_mb_per_node == 64000
    assert parts["open"].max_time_s is None
    assert parts["open"].max_mem_mb_per_node == 7500  # RealMemory minus MemSpecLimit


def test_show_job(backend, bindir):
    (bindir / "no_squeue_json").touch()  # a Slurm without JSON: scontrol's text
    job = backend.show_job("12")
    assert job.name == "my job" and (job.user, job.uid) == ("alice", 1000)
    assert job.state == "COMPLETED" and job.finished and not job.held and job.reason is None
    assert job.time_limit_s == 120 and job.mem_mb is None
    assert job.workdir == "/home/alice"  # after Command's value with a space in it
    assert job.end_time == time.mktime((2026, 11, 24, 8, 13, 3, 0, 0, -1))  # local time, as scontrol prints it
    assert [c["argv"] for c in calls(bindir) if c["cmd"] == "scontrol"][0] == ["show", "job", "--oneliner", "12"]


@pytest.mark.parametrize("state", ["RUNNING", "COMPLETING", "PENDING"])
def test_a_job_that_has_not_ended_has_no_end_time(backend, bindir, state):
    """scontrol's EndTime of a job that runs (or will) is its start plus its limit: a plan, not an end."""
    (bindir / "no_squeue_json").touch()  # a Slurm without JSON: scontrol's text
    line = (bindir / "scontrol.job").read_text().replace("JobState=COMPLETED", f"JobState={state}")
    (bindir / "scontrol.job").write_text(line)
    job = backend.show_job("12")
    assert job.state == state and not job.finished and job.end_time is None


REAL = (
    "JobId={id} JobName={name} UserId={user} GroupId=x(1) JobState=RUNNING Reason=None TimeLimit=00:05:00 "
    "SubmitTime=2026-11-24T08:11:40 CPUs/Task=1 MinMemoryNode=100M WorkDir=/w Comment={comment} StdOut=/w/o"
)


@pytest.mark.parametrize(
    "name,comment",
    [
        ("a UserId=root(0)", "c"),  # a name that reads as the owner
        ("a", "x TimeLimit=UNLIMITED"),  # a comment that reads as the limit
        ("a", "x MinMemoryCPU=1G"),  # the other memory key
        ("a", "x ArrayJobId=99 ArrayTaskId=1"),  # another job's array id
    ],
)
def test_show_job_refuses_a_record_whose_own_text_reads_as_slurms(backend, bindir, name, comment):
    (bindir / "no_squeue_json").touch()  # a Slurm without JSON: scontrol's text
    (bindir / "scontrol.job").write_text(REAL.format(id=12, name=name, user="bob(1001)", comment=comment) + "\n")
    with pytest.raises(AmbiguousRecord, match=r"job 12 cannot be read safely.*harp leaves this job alone"):
        backend.show_job("12")


def test_show_job_refuses_a_record_that_a_line_break_cut_short(backend, bindir):
    (bindir / "no_squeue_json").touch()  # a Slurm without JSON: scontrol's text
    # the name ends the line with a made-up record; the real one goes on in the next line
    fake = "JobId=12 JobName=a UserId=root(0) JobState=RUNNING TimeLimit=UNLIMITED"
    (bindir / "scontrol.job").write_text(
        fake + "\n" + REAL.format(id=12, name="x", user="bob(1001)", comment="c") + "\n"
    )
    with pytest.raises(AmbiguousRecord, match="line break"):
        backend.show_job("12")
    (bindir / "scontrol.job").write_text(REAL.format(id=12, name="a", user="bob(1001)", comment="c") + "\n")
    assert backend.show_job("12").uid == 1001  # the same job, written plainly, is read


def test_held_jobs_without_json_leaves_out_a_record_a_line_break_made_up(backend, bindir):
    (bindir / "no_squeue_json").touch()  # a Slurm without JSON: scontrol's text
    bob = REAL.format(id=12, name="a", user="bob(1001)", comment="x")
    alice = REAL.format(id=13, name="b", user="alice(1000)", comment="y")
    forged = REAL.format(id=13, name="b", user="alice(1000)", comment="y").replace("00:05:00", "UNLIMITED")
    (bindir / "squeue.ids").write_text("12\n13\n")
    (bindir / "scontrol.job").write_text(bob + "\n" + alice + "\n")
    assert {j.job_id: j.time_limit_s for j in backend.held_jobs()} == {"12": 300, "13": 300}
    # bob's comment ends with a line break and a made-up record of alice's job 13
    (bindir / "scontrol.job").write_text(bob + "\n" + forged + "\n" + alice + "\n")
    (bindir / "scontrol.job.12").write_text(bob + "\n" + forged + "\n")  # what scontrol shows of job 12 alone
    (bindir / "scontrol.job.13").write_text(alice + "\n")
    listing = {j.job_id: (j.uid, j.time_limit_s) for j in backend.held_jobs()}
    assert listing == {"13": (1000, 300)}  # alice's job as slurmctld has it; bob's, unreadable, left out


def test_show_job_unknown(backend, bindir):
    (bindir / "no_squeue_json").touch()  # a Slurm without JSON: scontrol's text
    (bindir / "scontrol.job").unlink()
    with pytest.raises(SlurmError, match="Invalid job id specified"):
        backend.show_job("999")


def test_parse_kv_line_values_with_spaces_and_equals():
    kv = parse_kv_line("A=1 Reason=being fixed by admin [root@x] TRES=cpu=1,mem=2G B=(null)")
    assert kv == {"A": "1", "Reason": "being fixed by admin [root@x]", "TRES": "cpu=1,mem=2G", "B": "(null)"}


def test_job_control_argv(backend, bindir):
    backend.requeue_hold("5")
    backend.update_job("5", time_limit_s=90 * 60, mem_mb=600)
    backend.release("5")
    backend.cancel("5_2")
    assert [(c["cmd"], c["argv"]) for c in calls(bindir)] == [
        ("scontrol", ["requeuehold", "5"]),
        ("scontrol", ["update", "JobId=5", "TimeLimit=90", "MinMemoryNode=600"]),
        ("scontrol", ["release", "5"]),
        ("scancel", ["5_2"]),
    ]


def test_checkpoint_signal_argv_goes_to_the_batch_shell(backend, bindir):
    backend.signal("5", "usr1")
    backend.signal("6_1", "SIGUSR2")
    assert [(c["cmd"], c["argv"]) for c in calls(bindir)] == [
        ("scancel", ["--signal=USR1", "--batch", "5"]),
        ("scancel", ["--signal=USR2", "--batch", "6_1"]),
    ]
    with pytest.raises(SlurmError, match="not a signal name"):
        backend.signal("5", "USR1; rm")


def test_update_job_validation(backend, bindir):
    with pytest.raises(SlurmError, match="cannot change 'Time Limit'"):
        backend.update_job("5", **{"Time Limit": 3})
    with pytest.raises(SlurmError, match="invalid value"):
        backend.update_job("5", comment="")
    with pytest.raises(SlurmError, match="invalid value"):
        backend.update_job("5", comment="a\nb")
    with pytest.raises(SlurmError, match="at least one field"):
        backend.update_job("5")
    assert calls(bindir) == []


# ------------------------------------------------------------ get_backend


def test_get_backend():
    assert isinstance(get_backend(HarpSettings()), CliBackend)
    with pytest.raises(SlurmError, match="pyslurm"):
        get_backend(HarpSettings(slurm={"backend": "pyslurm"}))
    with pytest.raises(SlurmError, match=r"unknown slurm.backend 'rest'"):
        get_backend(HarpSettings(slurm={"backend": "rest"}))


@pytest.mark.parametrize(
    "path", sorted((Path(__file__).resolve().parents[2] / "fixtures" / "scontrol").glob("*.txt")), ids=lambda p: p.name
)
def test_every_recorded_release_prints_records_job_record_takes(path):
    lines = [ln for ln in path.read_text().splitlines() if ln.startswith("JobId=")]
    assert lines
    for ln in lines:
        kv = job_record(ln)
        assert kv["UserId"] and kv["TimeLimit"]


# ---------------------------------------------------------------- squeue --json (recorded on 22.05)
# tests/fixtures/squeue/22.05-jobs.json: job 1 (root, held) and job 3 (uid 1001, running) have comments
# and names with line breaks, '|', ';', '=', '\r' and whole made-up "JobId=... UserId=root(0)" runs


def test_show_job_reads_users_text_as_data_from_json(backend, bindir):
    job = backend.show_job("3")
    assert (job.uid, job.user, job.state, job.time_limit_s, job.mem_mb) == (1001, "harptest1", "RUNNING", 300, 100)
    assert job.comment == "x\nJobId=2 UserId=root(0) TimeLimit=UNLIMITED|harp retry 2 of 1"
    assert job.name == "evil|name;=\rJobId=1"
    assert job.end_time is None  # running: its end_time is a plan
    assert [c["argv"][:2] for c in calls(bindir)] == [["--json", "--states=all"]]
    assert not [c for c in calls(bindir) if c["cmd"] == "scontrol"]


def test_show_job_from_json_expands_output_patterns_and_counts_cpus_per_task(backend):
    job = backend.show_job("7")  # sbatch -H -o '/tmp/o_%j_%x.out' -e /tmp/e_%j.err -c 2 -J nm
    assert job.std_out == "/tmp/o_7_nm.out" and job.std_err == "/tmp/e_7.err"
    assert job.cpus_per_task == 2 and job.held


def test_show_job_from_json_array_tasks_and_unknown_ids(backend):
    assert backend.show_job("4_2").job_id == "6"  # a task by its array name, answered with its own id
    assert backend.show_job("5").state == "COMPLETED"
    with pytest.raises(SlurmError, match="Invalid job id specified"):
        backend.show_job("999")


def test_held_jobs_from_json_is_one_call_and_every_job(backend, bindir):
    jobs = {j.job_id: j for j in backend.held_jobs()}
    assert set(jobs) == {"1", "2", "3", "4_1", "4_2", "4_3", "7", "8"}
    assert jobs["3"].comment.startswith("x\nJobId=2") and jobs["3"].uid == 1001 and jobs["3"].running
    assert jobs["8"].array_job_id == "8" and jobs["8"].array_task is None and jobs["8"].pending
    assert [j.job_id for j in backend.queue()] == ["1", "3", "7", "8"]
    assert len([c for c in calls(bindir) if c["cmd"] == "squeue"]) == 2  # one per listing
    assert not [c for c in calls(bindir) if c["cmd"] == "scontrol"]


def test_a_comment_that_makes_up_another_jobs_marker_is_not_found_in_json(backend, bindir):
    """#44's takeover: a comment 'x\\nV|harp retry 2 of C' made job V look as if it carried C's marker."""
    (bindir / "sacct.json").write_text(json.dumps({"jobs": []}))
    assert backend.jobs_with_comment("harp retry 2 of 1", None, None) == []
    assert backend.jobs_with_comment("harp decision abc", None, None) == []  # not at the start
    assert backend.jobs_with_comment("plain", "harptest2", None) == ["5", "6", "4"]


def test_without_json_a_comment_is_read_alone_and_whole(backend, bindir):
    (bindir / "no_squeue_json").touch()
    (bindir / "no_json").touch()
    (bindir / "squeue.ids").write_text("12\n13\n")
    (bindir / "squeue.comment.12").write_text("x\n13|harp retry 2 of 1\n")  # bob's, with a made-up line
    (bindir / "squeue.comment.13").write_text("harp retry 2 of 1; harp decision t\n")
    (bindir / "sacct.psv").write_text("")
    assert backend.jobs_with_comment("harp retry 2 of 1", None, None) == ["13"]


def test_a_controller_down_at_the_first_listing_is_not_taken_for_a_squeue_without_json(backend, bindir):
    """Only squeue's own "no such option" switches to the text reader; an unreachable slurmctld is an error."""
    (bindir / "squeue").write_text(
        "#!/bin/sh\necho 'squeue: error: Unable to contact slurm controller (connect failure)' >&2\nexit 1\n"
    )
    with pytest.raises(SlurmError, match="Unable to contact slurm controller"):
        backend.held_jobs()
    assert backend._squeue_json_ok is None  # JSON is tried again next time
    (bindir / "squeue").write_text(FAKE.format(python=sys.executable, name="squeue"))
    assert {j.job_id for j in backend.held_jobs()} >= {"1", "3"}
    assert backend._squeue_json_ok is True
