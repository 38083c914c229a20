"""harp-submit end to end, with a recording fake sbatch and a fake harpd.

Each test runs harp-submit as its own process, as users do, and looks at what
sbatch received, what harpd was asked, and what the user saw.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable

import pytest
from submit_fakes import FIXTURES, change, decision

from harp_submit import __version__

JOB = "#!/bin/bash\n#SBATCH --time=2-00:00:00\n#SBATCH -c 2 # two cores\nmodule load foo\nsrun ./a.out\n"
SUBMITTED = (FIXTURES / "sbatch_submitted.out").read_bytes()  # as recorded from sbatch 22.05


def harp_lines(stderr: bytes) -> list[str]:
    return [line for line in stderr.decode().splitlines() if line.startswith("harp:")]


def assert_no_traceback(proc) -> None:
    assert b"Traceback" not in proc.stderr


# --- failing open -----------------------------------------------------------------------


def test_no_daemon_submits_unchanged_with_one_warning(run) -> None:
    run.write("job.sh", JOB)
    proc = run("-H", "--time=5", "job.sh", "arg1")
    assert proc.returncode == 0
    assert proc.stdout == b"Submitted batch job 4242\n"
    [call] = run.calls()
    assert call["argv"] == ["-H", "--time=5", "job.sh", "arg1"]
    assert call["script"] == JOB and call["stdin"] == ""
    [warning] = harp_lines(proc.stderr)
    assert "harpd is not running" in warning and "unchanged" in warning


def test_stalled_daemon_costs_at_most_the_timeout(run, harpd) -> None:
    harpd.delay_s = 120  # the client's own deadline is tested on its clock in test_client.py
    run.write("job.sh", JOB)
    t0 = time.monotonic()
    proc = run("-H", "job.sh", env={"HARP_TIMEOUT": "0.3"})
    elapsed = time.monotonic() - t0
    assert elapsed < 60  # 0.3 s budget + two Python start-ups on a busy machine, far below the stall
    assert run.calls()[0]["argv"] == ["-H", "job.sh"]
    [warning] = harp_lines(proc.stderr)
    assert "did not answer within 0.3 s" in warning


@pytest.mark.parametrize(
    "answer, words",
    [
        (b"garbage\n", "not JSON"),
        (b'{"ok": false, "error": "store locked"}\n', "harpd refused: store locked"),
        (b'{"ok": true, "decision": {"changes": [{"option": "time", "value": "1:2:3:4"}]}}\n', "sbatch would reject"),
        (None, "without an answer"),
    ],
)
def test_unusable_answers_submit_unchanged(run, harpd, answer, words) -> None:
    harpd.predict = lambda req: answer
    run.write("job.sh", JOB)
    proc = run("-H", "job.sh")
    assert proc.returncode == 0 and proc.stdout == b"Submitted batch job 4242\n"
    assert run.calls()[0]["argv"] == ["-H", "job.sh"] and run.calls()[0]["stdin"] == ""
    [warning] = harp_lines(proc.stderr)
    assert words in warning


def test_decision_beyond_partition_limits_is_refused(run, harpd) -> None:
    harpd.decision = decision(change("time", "3-00:00:00"), max_time_s=86400)
    run.write("job.sh", JOB)
    proc = run("-H", "job.sh")
    assert run.calls()[0]["argv"] == ["-H", "job.sh"]
    [warning] = harp_lines(proc.stderr)
    assert "beyond partition debug's limit of 1-00:00:00" in warning
    # the job is still registered, unchanged, so harpd learns from it
    [reg] = harpd.wait_for("register")
    assert reg["original"] == reg["submitted"] and reg["decision"] is None


# --- rewriting ----------------------------------------------------------------------------


def test_script_directives_are_rewritten_and_sent_on_stdin(run, harpd) -> None:
    harpd.decision = decision(change("time", "01:30:00"), change("mem", "2G", reason="peak RSS x1.2"))
    run.write("job.sh", JOB)
    proc = run("-H", "job.sh")
    assert proc.returncode == 0 and proc.stdout == b"Submitted batch job 4242\n"
    [call] = run.calls()
    # the script's name is kept as the job name (stdin jobs would be called "sbatch")
    assert call["argv"] == ["--open-mode=append", "-H", "--job-name=job.sh"]
    assert call["stdin"] == (
        "#!/bin/bash\n#SBATCH --time=01:30:00\n#SBATCH -c 2 # two cores\n#SBATCH --mem=2G\n"
        "module load foo\nsrun ./a.out\n"
    )
    assert harp_lines(proc.stderr) == [
        "harp: --time 2-00:00:00 -> 01:30:00 (#SBATCH line; 95th percentile of 37 similar runs)",
        "harp: --mem (not set) -> 2G (new #SBATCH line; peak RSS x1.2)",
    ]
    [pred] = harpd.ops("predict")
    job = pred["job"]
    assert job["script_name"] == "job.sh" and job["job_name"] == "job.sh" and job["cwd"] == str(run.home)
    assert job["request"]["time_s"] == 2 * 86400 and job["request"]["cpus_per_task"] == 2
    assert job["commands"] == ["module load foo", "srun ./a.out"]
    [reg] = harpd.wait_for("register")
    assert reg["job_id"] == "4242" and reg["v"] == 1
    assert reg["original"]["time_s"] == 2 * 86400 and reg["submitted"]["time_s"] == 5400
    assert reg["submitted"]["mem_mb"] == 2048 and reg["decision"]["model"] == "fake"


def test_script_arguments_go_with_dev_stdin(run, harpd) -> None:
    harpd.decision = decision(change("time", "45"))
    run.write("job.sh", JOB)
    run("-H", "job.sh", "in.dat", "--harp-off", "-t", "3")
    [call] = run.calls()
    assert call["argv"] == [
        "--open-mode=append",
        "-H",
        "--job-name=job.sh",
        "/dev/stdin",
        "in.dat",
        "--harp-off",
        "-t",
        "3",
    ]
    assert "#SBATCH --time=45\n" in call["stdin"]


def test_a_user_chosen_name_is_left_alone(run, harpd) -> None:
    harpd.decision = decision(change("time", "45"))
    run.write("job.sh", JOB.replace("#SBATCH -c 2", "#SBATCH -J mine -c 2"))
    run("-H", "job.sh")
    run("-H", "job.sh", env={"SBATCH_JOB_NAME": "env-name"})
    assert [c["argv"] for c in run.calls()] == [["--open-mode=append", "-H"], ["--open-mode=append", "-H"]]


def test_command_line_values_are_changed_on_the_command_line(run, harpd) -> None:
    harpd.decision = decision(change("time", "01:00:00"), change("cpus-per-task", "1"))
    run.write("job.sh", JOB)
    proc = run("-H", "-t", "3-0", "-Qc2", "job.sh")
    [call] = run.calls()
    # the script had no change left to make: it goes as the file it is
    assert call["argv"] == ["--open-mode=append", "-H", "-t", "01:00:00", "-Qc1", "job.sh"]
    assert call["script"] == JOB and call["stdin"] == ""
    assert harp_lines(proc.stderr) == []  # -Q: quiet, like sbatch


def test_environment_values_are_changed_in_the_environment(run, harpd) -> None:
    harpd.decision = decision(change("time", "01:00:00"))
    run.write("job.sh", "#!/bin/sh\nhostname\n")
    run("-H", "job.sh", env={"SBATCH_TIMELIMIT": "2-0", "SBATCH_ACCOUNT": "proj"})
    [call] = run.calls()
    assert call["env"] == {"SBATCH_TIMELIMIT": "01:00:00", "SBATCH_ACCOUNT": "proj"}
    assert call["argv"] == ["--open-mode=append", "-H", "job.sh"]
    assert harpd.ops("predict")[0]["job"]["account"] == "proj"


def test_script_on_standard_input(run, harpd) -> None:
    harpd.decision = decision(change("mem", "1G"))
    proc = run("-H", stdin=JOB.encode())
    [call] = run.calls()
    assert call["argv"] == ["--open-mode=append", "-H"]  # sbatch names it "sbatch" either way
    assert "#SBATCH --mem=1G\n" in call["stdin"]
    assert harpd.ops("predict")[0]["job"]["script_name"] is None
    assert proc.returncode == 0


def test_script_on_standard_input_unchanged_is_still_delivered(run) -> None:
    run("-H", stdin=JOB.encode())
    assert run.calls()[0]["stdin"] == JOB


def test_wrap_jobs_get_the_change_on_the_command_line(run, harpd) -> None:
    harpd.decision = decision(change("time", "5"))
    run("-H", "--wrap", "sleep 1")
    assert run.calls()[0]["argv"] == ["--open-mode=append", "-H", "--wrap", "sleep 1", "--time=5"]
    assert harpd.ops("predict")[0]["job"]["commands"] == ["sleep 1"]


def test_a_script_named_dev_stdin_is_read_and_sized_like_any_script(run, harpd) -> None:
    # Snakemake's --slurm-pass-command-as-script: `sbatch ... /dev/stdin` with the script piped in
    harpd.decision = decision(change("mem", "1G"))
    proc = run("-H", "/dev/stdin", "arg", stdin=JOB.encode())
    [call] = run.calls()
    assert call["argv"] == ["--open-mode=append", "-H", "/dev/stdin", "arg"]  # sbatch names the job "stdin" itself
    assert "#SBATCH --mem=1G\n" in call["stdin"] and "srun ./a.out\n" in call["stdin"]
    [ask] = harpd.ops("predict")
    assert ask["job"]["commands"] == ["module load foo", "srun ./a.out"]
    assert ask["job"]["request"]["time_s"] == 2 * 86400
    harpd.wait_for("register")
    assert proc.returncode == 0


def test_a_dev_stdin_script_harp_keeps_reaches_sbatch_byte_for_byte(run, harpd) -> None:
    proc = run("-H", "/dev/stdin", stdin=JOB.encode())
    [call] = run.calls()
    assert call["argv"] == ["-H", "/dev/stdin"] and call["stdin"] == JOB
    assert len(harpd.ops("predict")) == 1  # asked, and registered: harp learns from it
    harpd.wait_for("register")
    assert proc.returncode == 0


def test_chdir_and_path_find_the_script_sbatch_finds(run, harpd) -> None:
    harpd.decision = decision(change("time", "5"))
    run.write("sub/job.sh", JOB.replace("srun", "srun-in-sub"))
    run.write("job.sh", JOB)  # sbatch -D sub job.sh reads sub/job.sh, not this one
    run("-H", "-D", "sub", "job.sh")
    assert "srun-in-sub" in run.calls()[-1]["stdin"]
    run("-H", "-D", "sub", "./job.sh")  # but ./name is relative to where sbatch runs
    assert "srun-in-sub" not in run.calls()[-1]["stdin"] and "srun ./a.out" in run.calls()[-1]["stdin"]
    bindir = run.home / "pbin"
    run.write("pbin/onpath.sh", JOB.replace("srun", "srun-on-path"))
    run("-H", "onpath.sh", env={"PATH": f"{bindir}:{run.env['PATH']}"})
    assert "srun-on-path" in run.calls()[-1]["stdin"]


def test_a_changed_request_sbatch_refuses_falls_back_to_the_users_own(run, harpd) -> None:
    harpd.decision = decision(change("mem", "7000M"))
    run.write("job.sh", JOB)
    proc = run("-H", "job.sh", env={"FAKE_SBATCH_REJECT": "--mem=7000M"})
    first, second = run.calls()
    assert "--mem=7000M" in first["stdin"]
    assert second["argv"] == ["-H", "job.sh"] and second["stdin"] == "" and second["script"] == JOB
    assert proc.returncode == 0 and proc.stdout == b"Submitted batch job 4242\n"
    assert b"Requested node configuration" not in proc.stderr.split(b"harp: sbatch refused")[0]
    assert harp_lines(proc.stderr)[-1] == (
        "harp: sbatch refused the changed request (Batch job submission failed: Requested node configuration "
        "is not available); submitting your job as you wrote it"
    )
    [reg] = harpd.wait_for("register")
    assert reg["submitted"] == reg["original"] and reg["decision"] is None


@pytest.mark.parametrize(
    "args, message",
    [
        (["-H", "job.sh"], "sbatch: error: Batch job submission failed: Socket timed out on send/recv operation\n"),
        (
            ["--wait", "job.sh"],
            "sbatch: error: Batch job submission failed: Requested node configuration is not available\n",
        ),
    ],
)
def test_no_fallback_when_a_job_may_exist(run, harpd, args, message) -> None:
    harpd.decision = decision(change("mem", "7000M"))
    run.write("job.sh", JOB)
    proc = run(*args, env={"FAKE_SBATCH_REJECT": "--mem=7000M", "FAKE_SBATCH_REJECT_MSG": message})
    assert len(run.calls()) == 1 and proc.returncode == 1 and proc.stdout == b""
    assert proc.stderr.decode().endswith(message)  # sbatch's own words, unchanged


# --- what the user sees ------------------------------------------------------------------


def test_parsable_is_quiet_unless_verbose(run, harpd) -> None:
    harpd.decision = decision(change("time", "45"))
    run.write("job.sh", JOB)
    quiet = run("--parsable", "-H", "job.sh")
    assert quiet.stdout == b"4242\n" and harp_lines(quiet.stderr) == []
    loud = run("--parsable", "--harp-verbose", "-H", "job.sh")
    assert loud.stdout == b"4242\n" and len(harp_lines(loud.stderr)) == 1
    assert run.calls()[-1]["argv"] == ["--open-mode=append", "--parsable", "-H", "--job-name=job.sh"]


def test_sbatch_output_and_exit_code_pass_through_byte_for_byte(run, harpd) -> None:
    harpd.decision = decision(change("time", "45"))
    run.write("job.sh", JOB)
    odd = "Submitted batch job 77 on cluster blue\n\x1b[0mextra \xe9\n"
    proc = run(
        "-H", "job.sh", env={"FAKE_SBATCH_OUT": odd, "FAKE_SBATCH_RC": "3", "FAKE_SBATCH_ERR": "sbatch: warning: x\n"}
    )
    assert proc.stdout == odd.encode() and proc.returncode == 3
    assert proc.stderr.decode().splitlines()[-1] == "sbatch: warning: x"
    assert harpd.wait_for("register")[0]["job_id"] == "77"
    proc = run("-H", "job.sh", env={"FAKE_SBATCH_OUT": "", "FAKE_SBATCH_RC": "1", "HARP_SOCKET": "/nonexistent"})
    assert proc.stdout == b"" and proc.returncode == 1


def test_recorded_parsable_output_with_cluster_registers_the_bare_id(run, harpd) -> None:
    run.write("job.sh", JOB)
    proc = run("--parsable", "job.sh", env={"FAKE_SBATCH_OUT": "123;harptest\n"})
    assert proc.stdout == b"123;harptest\n"
    assert harpd.wait_for("register")[0]["job_id"] == "123"


def test_registration_problems_never_change_the_outcome(run, harpd) -> None:
    harpd.register = lambda req: b'{"ok": false, "error": "job 4242 is not yours"}\n'
    run.write("job.sh", JOB)
    proc = run("-H", "job.sh")
    assert proc.returncode == 0 and proc.stdout == SUBMITTED.replace(b"83", b"4242")
    assert harp_lines(proc.stderr) == []
    assert harpd.wait_for("register")[0]["job_id"] == "4242"  # it was tried


def test_the_user_never_waits_for_registration(run, harpd) -> None:
    """harpd holds the registration until the test lets go, which it does only once the user's run is over."""
    release = threading.Event()
    answered = threading.Event()

    def stall(req):
        release.wait(120)
        answered.set()
        return b'{"ok": true}\n'

    harpd.register = stall
    run.write("job.sh", JOB)
    try:
        proc = run("-H", "job.sh", timeout=90)  # waits for harp-submit's stdout and stderr to close, too
        assert proc.returncode == 0 and proc.stdout == b"Submitted batch job 4242\n"
        assert harpd.wait_for("register", timeout=60)[0]["job_id"] == "4242"  # it was asked ...
        assert not answered.is_set()  # ... and had not answered when the user got the prompt back
    finally:
        release.set()


def test_registration_happens_while_sbatch_waits(run, harpd) -> None:
    """--wait prints the job id long before sbatch ends: harpd hears of the job at once.

    The sbatch here waits until the test lets it end, which the test does only
    once harpd has the registration: it cannot end before, however slow the machine.
    """
    run.write("job.sh", JOB)
    go = run.home / "sbatch-may-end"
    run.write(
        "slow-sbatch",
        "#!/bin/sh\necho 'Submitted batch job 99'\n"
        f"i=0; while [ ! -e {go} ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done\nexit 4\n",
        mode=0o755,
    )
    result: list = []
    runner = threading.Thread(
        target=lambda: result.append(
            run("--wait", "job.sh", env={"HARP_SBATCH": str(run.home / "slow-sbatch")}, timeout=180)
        )
    )
    runner.start()
    try:
        [reg] = harpd.wait_for("register", timeout=120)
        assert reg["job_id"] == "99"
        assert runner.is_alive() and not go.exists()  # registered while sbatch still waits
    finally:
        go.touch()
        runner.join(180)
    [proc] = result
    assert proc.returncode == 4 and proc.stdout == b"Submitted batch job 99\n"


def test_test_only_is_sbatchs_own_answer(run, harpd) -> None:
    """--test-only (command line or #SBATCH) goes to sbatch untouched: its streams and code exactly, no harpd call."""
    harpd.decision = decision(change("time", "45"))
    err = (FIXTURES / "sbatch_test_only.err").read_text()
    run.write("job.sh", JOB)
    run.write("job2.sh", JOB.replace("#SBATCH", "#SBATCH --test-only\n#SBATCH", 1))
    for args in (("--test-only", "job.sh"), ("--test-only", "--time-min=50", "job.sh"), ("job2.sh",)):
        proc = run(*args, env={"FAKE_SBATCH_OUT": "", "FAKE_SBATCH_ERR": err})
        assert proc.returncode == 0 and proc.stdout == b"" and proc.stderr.decode() == err, args
    assert harpd.ops("predict") == []
    # a plain submission after them registers: once harpd has that one, a registration the
    # --test-only runs had sent off (in their detached children) would have had time to arrive too
    proc = run("job.sh", env={"FAKE_SBATCH_JOBID": "77"})
    assert proc.returncode == 0 and proc.stdout == b"Submitted batch job 77\n"
    assert [r["job_id"] for r in harpd.wait_for("register", timeout=60)] == ["77"]
    assert [r["job_id"] for r in harpd.ops("register")] == ["77"] and len(harpd.ops("predict")) == 1


def test_dry_run_prints_and_submits_nothing(run, harpd) -> None:
    harpd.decision = decision(change("time", "45"))
    run.write("job.sh", JOB)
    proc = run("--harp-dry-run", "-H", "job.sh")
    assert proc.returncode == 0 and run.calls() == []
    assert proc.stdout.decode() == JOB.replace("2-00:00:00", "45")
    lines = harp_lines(proc.stderr)
    assert any("would run: sbatch --open-mode=append -H --job-name=job.sh" in x for x in lines)
    # in words: the change and its reason, what was kept and why, the partition's caps
    assert "harp: decision (model fake):" in lines
    assert "harp:   --time 2-00:00:00 -> 45: 95th percentile of 37 similar runs" in lines or any(
        x.startswith("harp:   --time ") and x.endswith("-> 45: 95th percentile of 37 similar runs") for x in lines
    )
    assert "harp:   partition debug allows at most: time 1-00:00:00, memory 8000 MB per node, 2 cores per node" in lines
    assert not any(x.startswith("harp: decision: {") for x in lines)
    assert harpd.ops("register") == []
    # harpd is told: a dry run must not count as a submission (the next answer would move)
    assert [r.get("dry_run") for r in harpd.ops("predict")] == [True]
    run("-H", "job.sh")
    assert [r.get("dry_run") for r in harpd.ops("predict")] == [True, None]


def test_dry_run_json_behind_harp_json(run, harpd) -> None:
    harpd.decision = decision(change("time", "45"))
    run.write("job.sh", JOB)
    proc = run("--harp-dry-run", "--harp-json", "-H", "job.sh")
    assert proc.returncode == 0 and run.calls() == []
    got = [x for x in harp_lines(proc.stderr) if x.startswith("harp: decision: ")]
    assert len(got) == 1 and json.loads(got[0][len("harp: decision: ") :])["changes"][0]["value"] == "45"


def test_dry_run_says_why_each_resource_was_kept(run, harpd) -> None:
    harpd.decision = decision(
        explain={
            "time": {"reason": "cold start: 3 of 5 runs"},
            "mem": {"reason": "rounded bound reaches the request: kept"},
            "cores": "not a dict",
        },
        partition="",
        max_time_s=None,
        max_mem_mb=None,
        max_cpus=None,
        model=None,
    )
    run.write("job.sh", JOB)
    lines = harp_lines(run("--harp-dry-run", "job.sh").stderr)
    assert "harp: decision (no model):" in lines
    assert "harp:   time limit kept as written: cold start: 3 of 5 runs" in lines
    assert "harp:   memory kept as written: rounded bound reaches the request: kept" in lines
    assert not any("cores" in x for x in lines)


def test_dry_run_reads_the_typed_why_of_a_newer_harpd(run, harpd) -> None:
    """``reason``/``kept`` are read first; explain's keys only when a harpd sends no typed field."""
    harpd.decision = {
        **decision(explain={"time": {"reason": "explain's words"}, "mem": {"reason": "explain's memory"}}),
        "kept": {"time": "typed words", "mem": None, "cores": "typed cores"},
        "reason": "typed reason",
    }
    run.write("job.sh", JOB)
    lines = harp_lines(run("--harp-dry-run", "job.sh").stderr)
    assert "harp:   time limit kept as written: typed words" in lines
    assert "harp:   memory kept as written: explain's memory" in lines  # no typed word: the older key
    assert "harp:   cores kept as written: typed cores" in lines
    assert not any("explain's words" in x for x in lines)


def test_dry_run_words_are_harpds_text_made_safe(run, harpd) -> None:
    """A reason with control characters or huge length never reaches the terminal as such."""
    harpd.decision = decision(explain={"time": {"reason": "a\x1b[31mred\x07" + "x" * 5000}})
    run.write("job.sh", JOB)
    proc = run("--harp-dry-run", "job.sh")
    line = next(x for x in harp_lines(proc.stderr) if "time limit kept" in x)
    assert "\x1b" not in line and "\x07" not in line and len(line) < 400


def test_explain_prints_the_prediction_details(run, harpd) -> None:
    harpd.decision = decision(change("time", "45"), explain={"quantile": 0.95, "n_similar": 37})
    run.write("job.sh", JOB)
    proc = run("--harp-explain", "job.sh")
    lines = harp_lines(proc.stderr)
    assert "harp: explain: model: fake" in lines
    assert "harp: explain: quantile: 0.95" in lines and "harp: explain: n_similar: 37" in lines
    assert "--harp-explain" not in run.calls()[0]["argv"]


def test_help_and_version_add_harps_own(run) -> None:
    help_text = (FIXTURES / "sbatch_help.out").read_text()
    proc = run("--help", env={"FAKE_SBATCH_OUT": help_text})
    out = proc.stdout.decode()
    assert out.startswith(help_text) and "--harp-dry-run" in out
    assert "#HARP retry" in out and "HARP_SERVERS" in out and "harp status JOBID" in out and "--harp-json" in out
    assert out.endswith(f"harp-submit {__version__}\n") and proc.returncode == 0
    proc = run("-V", env={"FAKE_SBATCH_OUT_FILE": str(FIXTURES / "sbatch_version.out")})
    assert proc.stdout == f"slurm-wlm 22.05.8\nharp-submit {__version__}\n".encode()
    assert [c["argv"] for c in run.calls()] == [["--help"], ["-V"]]


# --- opting out -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, env, script",
    [
        (["--harp-off", "-H", "job.sh"], {}, JOB),
        (["-H", "job.sh"], {"HARP_DISABLE": "1"}, JOB),
        (["-H", "job.sh"], {}, JOB.replace("module load foo\n", "#HARP off\nmodule load foo\n")),
        (["-H", "job.sh"], {}, JOB + "#HARP OFF  # not today\n"),
    ],
)
def test_opt_outs_skip_harpd_entirely(run, harpd, args, env, script) -> None:
    run.write("job.sh", script)
    proc = run(*args, env=env)
    assert run.calls()[0]["argv"] == ["-H", "job.sh"] and run.calls()[0]["stdin"] == ""
    assert harpd.requests == [] and harp_lines(proc.stderr) == []


def test_harp_options_after_the_script_belong_to_the_script(run) -> None:
    run.write("job.sh", JOB)
    run("job.sh", "--harp-dry-run")
    assert run.calls()[0]["argv"] == ["job.sh", "--harp-dry-run"]


# --- bad input: sbatch's own behaviour, or one clear harp line; never a traceback ---------


def test_missing_script_goes_to_sbatch_untouched(run, harpd) -> None:
    proc = run("-H", "nothere.sh")
    assert run.calls()[0]["argv"] == ["-H", "nothere.sh"]
    assert harpd.requests == [] and harp_lines(proc.stderr) == []
    assert_no_traceback(proc)


def test_directory_as_script_goes_to_sbatch_untouched(run, harpd) -> None:
    (run.home / "adir").mkdir()
    proc = run("-H", "adir")
    assert run.calls()[0]["argv"] == ["-H", "adir"] and harpd.requests == []
    assert_no_traceback(proc)


@pytest.mark.skipif(
    os.geteuid() == 0 and shutil.which("setpriv") is None, reason="root needs setpriv to feel permissions"
)
def test_unreadable_script_goes_to_sbatch_untouched(run, harpd) -> None:
    path = run.write("secret.sh", JOB, mode=0o000)
    proc = run("-H", "secret.sh", no_dac_override=os.geteuid() == 0)
    assert run.calls()[0]["argv"] == ["-H", "secret.sh"]
    assert run.calls()[0]["script"] is None  # the fake cannot read it either
    assert harpd.requests == [] and harp_lines(proc.stderr) == []
    assert_no_traceback(proc)
    path.chmod(0o644)


@pytest.mark.parametrize(
    "name, content",
    [
        ("binary.sh", b"#!/bin/bash\n#SBATCH -t 5\n\x00\x01\x02\xff\n"),
        ("crlf.sh", b"#!/bin/bash\r\n#SBATCH -t 5\r\necho hi\r\n"),
        ("noshebang.sh", b"#SBATCH -t 5\necho hi\n"),
        ("empty.sh", b""),
        ("blank.sh", b"\n \n\t\n"),
        ("badmem.sh", b"#!/bin/bash\n#SBATCH --mem=12X\necho hi\n"),
        ("badtime.sh", b"#!/bin/bash\n#SBATCH -t 1:2:3:4\necho hi\n"),
        ("baddirective.sh", b"#!/bin/bash\n#SBATCH --bogus\necho hi\n"),
        ("unmatched.sh", b'#!/bin/bash\n#SBATCH -J "oops\necho hi\n'),
        ("het.sh", b"#!/bin/bash\n#SBATCH -t 3\n#SBATCH hetjob\n#SBATCH -t 4\necho hi\n"),
    ],
)
def test_scripts_sbatch_refuses_go_to_sbatch_untouched(run, harpd, name, content) -> None:
    run.write(name, content)
    proc = run("-H", name)
    [call] = run.calls()
    assert call["argv"] == ["-H", name] and call["stdin"] == ""
    assert call["script"] is None or call["script"].encode("utf-8", "surrogateescape") == content
    assert harpd.requests == [] and harp_lines(proc.stderr) == []
    assert_no_traceback(proc)


def test_script_over_4_mib_gets_one_harp_line(run, harpd) -> None:
    run.write("big.sh", "#!/bin/bash\n#SBATCH -t 5\n" + "# padding\n" * 450_000)
    proc = run("-H", "big.sh")
    assert run.calls()[0]["argv"] == ["-H", "big.sh"] and harpd.requests == []
    [line] = harp_lines(proc.stderr)
    assert "larger than 4 MiB" in line
    big = ("#!/bin/bash\n" + "# padding\n" * 450_000).encode()
    proc = run("-H", stdin=big)
    assert run.calls()[1]["stdin"].encode() == big  # delivered intact
    assert "larger than 4 MiB" in harp_lines(proc.stderr)[0]


@pytest.mark.parametrize(
    "args, env",
    [
        (["-t", "1:2:3:4", "job.sh"], {}),
        (["--mem=12X", "job.sh"], {}),
        (["-c", "0", "job.sh"], {}),
        (["job.sh"], {"SBATCH_TIMELIMIT": ""}),
        (["job.sh"], {"SBATCH_MEM_PER_NODE": "lots"}),
        (["--bogus", "job.sh"], {}),
        (["--time"], {}),
        (["--wrap=echo", "job.sh"], {}),
        (["-n1", ":", "-n2", "job.sh"], {}),  # het job on the command line
    ],
)
def test_invalid_command_lines_go_to_sbatch_untouched(run, harpd, args, env) -> None:
    run.write("job.sh", JOB)
    proc = run(*args, env=env)
    assert run.calls()[0]["argv"] == args and run.calls()[0]["stdin"] == ""
    assert harpd.requests == [] and harp_lines(proc.stderr) == []
    assert_no_traceback(proc)


def test_an_internal_error_submits_unchanged(run, harpd) -> None:
    run.write("job.sh", JOB)
    code = (
        "import sys, harp_submit.cli as c, harp_submit.decision as d\n"
        "def boom(*a, **k): raise RuntimeError('synthetic')\n"
        "d.validate = boom\nsys.exit(c.main())"
    )
    import subprocess

    proc = subprocess.run(
        [sys.executable, "-c", code, "-H", "job.sh"],
        env=run.env,
        cwd=run.home,
        capture_output=True,
        stdin=subprocess.DEVNULL,
        timeout=300,
    )
    assert proc.returncode == 0 and proc.stdout == b"Submitted batch job 4242\n"
    assert run.calls()[0]["argv"] == ["-H", "job.sh"]
    [line] = harp_lines(proc.stderr)
    assert "internal error (RuntimeError: synthetic)" in line
    assert_no_traceback(proc)


def test_missing_sbatch_is_one_clear_line(run) -> None:
    run.write("job.sh", JOB)
    proc = run("job.sh", env={"HARP_SBATCH": None, "PATH": "/nonexistent"})
    assert proc.returncode == 127
    assert harp_lines(proc.stderr)[-1] == "harp: cannot find sbatch in PATH (set HARP_SBATCH to its path)"


def test_sbatch_killed_by_a_signal_kills_harp_submit_the_same_way(run, harpd) -> None:
    run.write("job.sh", JOB)
    proc = run("job.sh", env={"FAKE_SBATCH_SIGNAL": str(int(signal.SIGTERM))})
    assert proc.returncode == -signal.SIGTERM


# --- the decision's token: echoed at registration, kept with the job in Slurm -----------------

TOKEN = "Tok3n_of-harpd-0123456"


def _answer_with_token(decision_: dict) -> Callable[[dict], bytes]:
    return lambda req: (json.dumps({"ok": True, "decision": decision_, "token": TOKEN}) + "\n").encode()


def test_a_changed_job_carries_the_token_in_its_comment_after_the_users_own(run, harpd) -> None:
    harpd.predict = _answer_with_token(decision(change("time", "01:30:00")))
    run.write("job.sh", JOB)
    proc = run("-H", "--comment=rule_align_wildcards_sample=A", "job.sh")
    assert proc.returncode == 0, proc.stderr
    [call] = run.calls()
    comments = [a for a in call["argv"] if a.startswith("--comment=")]
    # sbatch uses the last: the user's comment in front, then the token
    assert comments[-1] == f"--comment=rule_align_wildcards_sample=A; harp decision {TOKEN}"
    [reg] = harpd.wait_for("register")
    assert reg["token"] == TOKEN


def test_a_job_harp_left_alone_keeps_its_comment_exactly(run, harpd) -> None:
    harpd.predict = _answer_with_token(decision())
    run.write("job.sh", JOB)
    proc = run("-H", "--comment=mine", "job.sh")
    assert proc.returncode == 0 and run.calls()[0]["argv"] == ["-H", "--comment=mine", "job.sh"]
    [reg] = harpd.wait_for("register")
    assert reg["token"] == TOKEN  # still bound: harpd checks the job has the user's own limits


def test_registration_is_retried_while_slurm_does_not_know_the_job(run, harpd) -> None:
    answers = [
        b'{"ok": false, "error": "Slurm does not know job 4242 yet; register a job after sbatch has printed its id"}\n'
    ] * 2 + [b'{"ok": true}\n']
    release = threading.Event()  # the last try is held until the user's run is over
    answered = threading.Event()

    def answer(req):
        if answers:
            return answers.pop(0)
        release.wait(120)
        answered.set()
        return b'{"ok": true}\n'

    harpd.register = answer
    run.write("job.sh", JOB)
    try:
        proc = run("-H", "job.sh", timeout=90)
        assert proc.returncode == 0 and not answered.is_set()  # the user does not wait for the retries
        got = harpd.wait_for("register", n=3, timeout=60)
    finally:
        release.set()
    assert [r["job_id"] for r in got] == ["4242"] * 3


def test_registration_is_not_retried_after_a_final_refusal(monkeypatch) -> None:
    from harp_submit import client, registration, route

    tries = []

    def ask(where, message, timeout):
        tries.append(message)
        raise client.HarpdUnavailable("harpd refused: job 4242 is not yours", reachable=True, final=True)

    slept: list[float] = []
    monkeypatch.setattr(registration.client, "ask", ask)
    assert registration.send(route.Route("/nonexistent"), {"op": "register"}, 1.0, 60.0, sleep=slept.append) is False
    assert len(tries) == 1 and slept == []


def test_registration_backs_off_within_its_budget(monkeypatch) -> None:
    from harp_submit import client, registration, route

    now = [0.0]
    slept: list[float] = []

    def sleep(s: float) -> None:
        slept.append(s)
        now[0] += s

    def ask(where, message, timeout):
        now[0] += timeout
        raise client.HarpdUnavailable("no answer within 2 s")

    monkeypatch.setattr(registration.client, "ask", ask)
    ok = registration.send(
        route.Route("/nonexistent"), {"op": "register"}, 2.0, 60.0, sleep=sleep, clock=lambda: now[0]
    )
    assert ok is False and now[0] <= 60.0
    assert slept[:5] == [0.5, 1.0, 2.0, 4.0, 8.0] and max(slept) == registration.MAX_PAUSE_S
