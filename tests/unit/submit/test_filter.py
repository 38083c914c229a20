"""harp-filter, the helper of the cli_filter plugin: its line protocol, checks and fail-open paths.

The plugin itself (Lua inside sbatch) is tested on a real cluster in
tests/slurm/test_plugins.py; here the helper runs as the plugin runs it, a
separate process given a request file, against a fake harpd.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from submit_fakes import FakeHarpd, change, decision

from harp_submit import filter as hf

REPO = Path(__file__).resolve().parents[3]
LIMITS = dict(partition="short", max_time_s=3600, max_mem_mb=8000, max_cpus=8)
SCRIPT = "#!/bin/bash\n#SBATCH --time=50\n#SBATCH --mem=300M\nsrun ./simulate --steps 100\n"


@pytest.fixture
def home():
    d = tempfile.mkdtemp(prefix="hft-", dir="/tmp")  # short: Unix socket paths are limited
    try:
        yield Path(d)
    finally:
        import shutil

        shutil.rmtree(d, ignore_errors=True)


def message(
    home: Path,
    options: dict,
    *,
    script: str | None = SCRIPT,
    command: str = "sbatch",
    cmdline: list[str] | None = None,
    offset: int = 0,
) -> dict:
    if script is not None:
        (home / "job.sh").write_text(script)
        options = {**options, "argv": options.get("argv", [str(home / "job.sh")])}
    return {
        "v": 1,
        "command": command,
        "offset": offset,
        "options": options,
        "cmdline": cmdline if cmdline is not None else ["sbatch", str(home / "job.sh")],
    }


def run_helper(home: Path, msg: dict | str, env: dict[str, str]) -> tuple[int, list[tuple[str, ...]]]:
    """Run ``harp-filter --request`` as the plugin does; (exit code, parsed lines)."""
    req = home / "req.json"
    req.write_text(msg if isinstance(msg, str) else json.dumps(msg))
    e = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(REPO), "HARP_CONFIG": "/nonexistent/harpd.toml", **env}
    proc = subprocess.run(
        [sys.executable, "-m", "harp_submit.filter", "--request", str(req)],
        capture_output=True,
        text=True,
        env=e,
        cwd=home,
        timeout=300,
    )
    assert proc.stderr == ""  # the plugin reads stdout only; nothing may leak to the terminal
    lines = proc.stdout.splitlines()
    assert lines[0] == hf.PROTOCOL
    return proc.returncode, [tuple(x.split("\t")) for x in lines[1:]]


def kinds(lines, kind: str) -> list[tuple[str, ...]]:
    return [x[1:] for x in lines if x[0] == kind]


def test_decision_becomes_option_settings(home) -> None:
    with FakeHarpd(home / "h.sock", decision(change("time", "00:07:00"), change("mem", "200M"), **LIMITS)) as fake:
        msg = message(
            home,
            {"time": "00:50:00", "mem": "300", "cpus-per-task": "2"},
            cmdline=["sbatch", "-c", "2", str(home / "job.sh"), "arg"],
        )
        rc, lines = run_helper(home, msg, {"HARP_SOCKET": fake.path})
        assert rc == 0
        assert kinds(lines, "set") == [("time", "00:07:00"), ("mem", "200M")]
        assert kinds(lines, "say") == [
            ("--time 00:50:00 -> 00:07:00 (95th percentile of 37 similar runs)",),
            ("--mem 300M -> 200M (95th percentile of 37 similar runs)",),
        ]
        assert kinds(lines, "mark") == [("cli_filter time=00:50:00>00:07:00 mem=300M>200M",)]
        assert lines[-1] == ("ok",)
        [pred] = fake.ops("predict")
        job = pred["job"]
        assert job["request"]["time_s"] == 3000 and job["request"]["mem_mb"] == 300
        assert job["request"]["cpus_per_task"] == 2
        assert job["commands"] == ["srun ./simulate --steps 100"]
        assert job["job_name"] == "job.sh" and job["cwd"] == str(home)
        [(payload,)] = kinds(lines, "register")
        reg = json.loads(payload)
        assert reg["op"] == "register" and reg["original"]["time_s"] == 3000
        assert reg["submitted"]["time_s"] == 420 and reg["submitted"]["mem_mb"] == 200
        # recovery's argv: sbatch's own, with harp's values just before the script
        assert reg["job"]["argv"] == ["-c", "2", "--time=00:07:00", "--mem=200M", str(home / "job.sh"), "arg"]


def test_sbatch_spellings_are_read_as_sbatch_means_them() -> None:
    argv = hf.options_argv(
        {
            "mem": "300",
            "mem-per-gpu": "2G",
            "gres": "gres:gpu:a100:1,gres:shard:2",
            "time": "1-00:00:00",
            "wrap": "ignored here",
            "parsable": "set",
        }
    )
    assert argv == ["--time=1-00:00:00", "--mem=300M", "--mem-per-gpu=2G", "--gres=gpu:a100:1,shard:2"]


def test_no_change_registers_without_settings(home) -> None:
    with FakeHarpd(home / "h.sock", decision(**LIMITS)) as fake:
        rc, lines = run_helper(home, message(home, {"time": "00:50:00"}), {"HARP_SOCKET": fake.path})
    assert kinds(lines, "set") == [] and kinds(lines, "say") == []
    assert kinds(lines, "mark") == [("cli_filter kept",)]
    assert json.loads(kinds(lines, "register")[0][0])["decision"]["changes"] == []
    assert lines[-1] == ("ok",)


def test_wrap_jobs_send_the_command(home) -> None:
    with FakeHarpd(home / "h.sock", decision(change("time", "00:02:00"), **LIMITS)) as fake:
        msg = message(
            home,
            {"time": "00:10:00", "wrap": "python3 train.py --epochs 3", "argv": []},
            script=None,
            cmdline=["sbatch", "-t", "10", "--wrap", "python3 train.py --epochs 3"],
        )
        rc, lines = run_helper(home, msg, {"HARP_SOCKET": fake.path})
        assert kinds(lines, "set") == [("time", "00:02:00")]
        job = fake.ops("predict")[0]["job"]
        assert job["commands"] == ["python3 train.py --epochs 3"] and job["job_name"] == "wrap"


@pytest.mark.parametrize(
    "env, script, extra",
    [
        ({"HARP_DISABLE": "1"}, SCRIPT, {}),
        ({"HARP_DISABLE": "On"}, SCRIPT, {}),
        ({}, SCRIPT + "#HARP off\n", {}),
        ({}, SCRIPT.replace("#!/bin/bash\n", "#!/bin/bash\n#SBATCH hetjob\n"), {}),
        ({}, SCRIPT, {"cmdline": ["sbatch", "-n1", ":", "-n2", "job.sh"]}),  # het job on the command line
        ({}, SCRIPT, {"offset": 1}),
        ({}, None, {"options": {"time": "00:50:00", "argv": []}}),  # script on standard input
    ],
    ids=["HARP_DISABLE=1", "HARP_DISABLE=On", "#HARP off", "hetjob script", "hetjob argv", "offset 1", "stdin"],
)
def test_opt_outs_and_unknowables_are_silent_and_never_ask(home, env, script, extra) -> None:
    with FakeHarpd(home / "h.sock", decision(change("time", "00:07:00"), **LIMITS)) as fake:
        msg = message(home, {"time": "00:50:00"}, script=script)
        msg.update(extra)
        rc, lines = run_helper(home, msg, {"HARP_SOCKET": fake.path, **env})
        assert lines == [("ok",)]
        assert fake.requests == []


@pytest.mark.parametrize(
    "answer, expect",
    [
        (decision(change("time", "00:07:00"), change("mem", "90000M"), **LIMITS), "beyond partition short"),
        (decision(change("account", "other"), **LIMITS), "cannot change option 'account'"),
        (decision(change("time", "00:07:00; rm -rf /"), **LIMITS), "unusable value"),
        (
            decision(change("time", "00:07:00"), change("mem-per-cpu", "100M"), **LIMITS),
            "turns --mem into --mem-per-cpu, which only harp-submit can do",
        ),
    ],
    ids=["over the limit", "not changeable", "unsafe value", "memory option switch"],
)
def test_bad_decisions_are_refused_as_a_whole(home, answer, expect) -> None:
    with FakeHarpd(home / "h.sock", answer) as fake:
        rc, lines = run_helper(home, message(home, {"time": "00:50:00", "mem": "300"}), {"HARP_SOCKET": fake.path})
    assert kinds(lines, "set") == []
    [(say,)] = kinds(lines, "say")
    assert (
        say.startswith("ignoring harpd's decision: ")
        and expect in say
        and say.endswith("submitting your job unchanged")
    )
    assert json.loads(kinds(lines, "register")[0][0])["decision"] is None  # registered as unchanged
    assert lines[-1] == ("ok",)


def test_harpd_down_is_one_line_and_no_registration(home) -> None:
    rc, lines = run_helper(home, message(home, {"time": "00:50:00"}), {"HARP_SOCKET": str(home / "none.sock")})
    assert lines == [
        ("say", f"harpd is not running (no socket at {home / 'none.sock'}); submitting your job unchanged"),
        ("ok",),
    ]


def test_values_sbatch_would_refuse_leave_the_job_to_sbatch(home) -> None:
    with FakeHarpd(home / "h.sock", decision(change("time", "00:07:00"), **LIMITS)) as fake:
        rc, lines = run_helper(home, message(home, {"time": "00:50:00", "nodes": "2-1"}), {"HARP_SOCKET": fake.path})
        assert kinds(lines, "set") == [] and fake.requests == []
        assert "cannot read --nodes=2-1" in kinds(lines, "say")[0][0]


@pytest.mark.parametrize(
    "content, expect",
    [
        ("not json", "the plugin's request is not JSON"),
        ("[1, 2]", "not a JSON object"),
        ('{"v": 1, "command": "rm", "options": {}}', "the plugin sent no usable options"),
        ('{"v": 1, "command": "sbatch", "options": "x"}', "the plugin sent no usable options"),
    ],
)
def test_bad_request_files_fail_open_with_one_line(home, content, expect) -> None:
    rc, lines = run_helper(home, content, {"HARP_SOCKET": str(home / "none.sock")})
    assert kinds(lines, "set") == []
    [(say,)] = kinds(lines, "say")
    assert expect in say and say.endswith("submitting your job unchanged")


def test_unreadable_script_fails_open(home) -> None:
    msg = message(home, {"time": "00:50:00", "argv": [str(home / "gone.sh")]})
    rc, lines = run_helper(home, msg, {"HARP_SOCKET": str(home / "none.sock")})
    assert kinds(lines, "set") == [] and "cannot find the script" in kinds(lines, "say")[0][0]


def test_register_mode_sends_the_job_id_and_deletes_the_file(home) -> None:
    with FakeHarpd(home / "h.sock", decision(**LIMITS)) as fake:
        payload = home / "reg.json"
        payload.write_text(
            json.dumps({"op": "register", "job": {"job_name": "x"}, "original": {}, "submitted": {}, "decision": None})
        )
        e = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(REPO), "HARP_SOCKET": fake.path}
        proc = subprocess.run(
            [sys.executable, "-m", "harp_submit.filter", "--register", str(payload), "--job-id", "42"],
            capture_output=True,
            text=True,
            env=e,
            timeout=300,
        )
        assert proc.returncode == 0 and proc.stdout == "" and proc.stderr == ""
        assert not payload.exists()
        [reg] = fake.wait_for("register")
        assert reg["job_id"] == "42" and reg["job"] == {"job_name": "x"}


def test_register_mode_refuses_a_bad_job_id(home) -> None:
    payload = home / "reg.json"
    payload.write_text('{"op": "register"}')
    assert hf.main(["--register", str(payload), "--job-id", "42; rm"]) == 1
    assert not payload.exists()


def test_usage_errors(capsys) -> None:
    assert hf.main([]) == 2
    assert hf.main(["--request"]) == 2


def test_output_lines_cannot_be_split_by_user_text() -> None:
    answer = hf.Answer()
    answer.says.append("a\tb\nset\ttime\t1")
    assert answer.render().splitlines() == [hf.PROTOCOL, "say\ta b set time 1", "ok"]


def test_filter_imports_only_fast_standard_library_modules() -> None:
    code = (
        "import sys; before = set(sys.modules); sys.path.insert(0, sys.argv[1]);"
        "import harp_submit.filter; print(' '.join(sorted(set(sys.modules) - before)))"
    )
    out = subprocess.run([sys.executable, "-S", "-c", code, str(REPO)], capture_output=True, text=True, check=True)
    loaded = {m.split(".")[0] for m in out.stdout.split()}
    assert loaded - {"harp_submit"} <= set(sys.stdlib_module_names)
    assert not loaded & {"re", "enum", "typing", "json", "socket", "subprocess", "tempfile", "logging"}
