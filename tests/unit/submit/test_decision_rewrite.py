"""Checking harpd's decision, and applying it where each value lives."""

from __future__ import annotations

import pytest
from submit_fakes import change, decision

from harp_submit import directives
from harp_submit.decision import BadDecision, validate
from harp_submit.request import Request
from harp_submit.rewrite import RewriteError, apply
from harp_submit.sbatch_options import SBATCH_TABLE

RES = {"time_s": 600, "mem_mb": 1024, "cpus_per_task": 2, "partition": "debug"}


def ok(*changes, **limits):
    return {"ok": True, "decision": decision(*changes, **limits)}


def test_valid_decision() -> None:
    d, changes = validate(ok(change("time", "01:30:00"), change("mem", "4G")), RES)
    assert [(c.option, c.value, c.amount) for c in changes] == [("time", "01:30:00", 5400), ("mem", "4G", 4096)]
    assert d["model"] == "fake"


def test_no_changes_needs_no_limits() -> None:
    assert validate({"ok": True, "decision": {"changes": []}}, RES)[1] == []


@pytest.mark.parametrize(
    "answer, words",
    [
        ({"ok": True}, "not an object"),
        ({"ok": True, "decision": {"changes": "time"}}, "not a list"),
        (ok({"option": "uid", "value": "0"}), "cannot change option 'uid'"),
        (ok(change("time", "1:2:3:4")), "sbatch would reject"),
        (ok(change("time", "UNLIMITED")), "unlimited"),
        (ok(change("mem", "0")), "not a memory size"),
        (ok(change("mem", "4G; rm -rf ~")), "unusable value"),
        (ok(change("gres", "gpu:1\n#SBATCH --uid=0")), "unusable value"),
        (ok(change("time", "10"), change("time", "20")), "two changes"),
        (ok(change("mem", "1G"), change("mem-per-cpu", "1G")), "two changes"),
        ({"ok": True, "decision": {"changes": [change("time", "10")]}}, "no partition limits"),
        (ok(change("time", "2-00:00:01")), "beyond partition debug's limit of 1-00:00:00"),
        (ok(change("mem", "9000M")), "beyond partition debug's limit"),
        (ok(change("mem-per-cpu", "5G")), "x 2 CPUs is beyond"),
        (ok(change("cpus-per-task", "3")), "limit of 2 CPUs"),
        (ok(change("time", "10"), partition="gpu"), "limits are for partition gpu"),
        (ok(change("time", "10"), max_time_s="lots"), "not a number"),
    ],
)
def test_bad_decisions_are_refused_whole(answer, words: str) -> None:
    with pytest.raises(BadDecision) as info:
        validate(answer, RES)
    assert words in str(info.value)


def test_limits_follow_a_partition_change() -> None:
    a = ok(change("partition", "long"), change("time", "2-00:00:00"), partition="long", max_time_s=5 * 86400)
    assert len(validate(a, RES)[1]) == 2


# --- rewrite ------------------------------------------------------------------------------


def request(
    argv: list[str], env: dict[str, str] | None = None, text: str | None = None, wrap: str | None = None
) -> Request:
    script = directives.parse(text) if text is not None else None
    return Request(
        SBATCH_TABLE.parse(argv), env or {}, script, script_path="job.sh" if text else None, script_text=text, wrap=wrap
    )


def changes(*cs):
    return validate(ok(*cs, max_cpus=64, max_mem_mb=10**6, max_time_s=10**7), RES)[1]


SCRIPT = "#!/bin/bash\n#SBATCH --time=10 -c 2 # small\n#SBATCH --mem-per-cpu=500M\necho hi\n"


def test_script_values_are_replaced_in_the_script() -> None:
    r = request([], text=SCRIPT)
    out = apply(r, [], changes(change("time", "01:00:00"), change("mem", "2G")))
    assert out.script_text == "#!/bin/bash\n#SBATCH --time=01:00:00 -c 2 # small\n#SBATCH --mem=2G\necho hi\n"
    assert not out.argv_changed and not out.env_changed and out.script_changed
    assert [a.describe() for a in out.applied] == [
        "--time 10 -> 01:00:00 (#SBATCH line; 95th percentile of 37 similar runs)",
        "--mem-per-cpu=500M -> --mem=2G (#SBATCH line; 95th percentile of 37 similar runs)",
    ]


def test_command_line_values_are_replaced_on_the_command_line() -> None:
    argv = ["-H", "-t", "30", "--mem-per-cpu=1G", "-Qc4", "job.sh", "-t", "99"]
    r = request(argv, text=SCRIPT)
    out = apply(r, argv, changes(change("time", "45"), change("mem-per-cpu", "2G"), change("cpus-per-task", "1")))
    assert out.argv == ["-H", "-t", "45", "--mem-per-cpu=2G", "-Qc1", "job.sh", "-t", "99"]
    assert out.script_text == SCRIPT  # the script's overridden values stay
    assert [a.where for a in out.applied] == ["command line"] * 3


def test_environment_values_are_replaced_in_the_environment() -> None:
    env = {"SBATCH_TIMELIMIT": "30", "SBATCH_MEM_PER_CPU": "1G", "OTHER": "x"}
    r = request([], env, text="#!/bin/sh\necho\n")
    out = apply(r, [], changes(change("time", "45"), change("mem", "4G")))
    assert out.environ == {"SBATCH_TIMELIMIT": "45", "SBATCH_MEM_PER_NODE": "4G", "OTHER": "x"}
    assert out.env_changed and not out.script_changed and not out.argv_changed


def test_values_never_set_become_new_directives() -> None:
    r = request(["-p", "debug"], text="#!/bin/bash\n#SBATCH -J x\necho hi\n")
    out = apply(r, ["-p", "debug"], changes(change("gres", "gpu:1")))
    assert out.script_text == "#!/bin/bash\n#SBATCH -J x\n#SBATCH --gres=gpu:1\necho hi\n"


def test_wrap_jobs_get_options_on_the_command_line() -> None:
    argv = ["-H", "--wrap=sleep 1"]
    r = request(argv, wrap="sleep 1")
    out = apply(r, argv, changes(change("time", "5")))
    assert out.argv == ["-H", "--wrap=sleep 1", "--time=5"]
    argv = ["-H", "--wrap", "sleep 1", "--"]
    out = apply(request(argv, wrap="sleep 1"), argv, changes(change("time", "5")))
    assert out.argv == ["-H", "--wrap", "sleep 1", "--time=5", "--"]


def test_a_memory_option_in_two_places_cannot_be_rewritten_cleanly() -> None:
    # sbatch itself refuses --mem on the command line with --mem-per-cpu in the script
    argv = ["--mem=1G", "job.sh"]
    r = request(argv, text=SCRIPT)
    with pytest.raises(RewriteError, match="conflict"):
        apply(r, argv, changes(change("mem", "2G")))
