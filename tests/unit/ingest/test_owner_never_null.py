"""A job's owner never ends up null: 22.05's sacct --json prints "user": null without an association."""

from __future__ import annotations

import pwd
from pathlib import Path

from harpd.slurm import sacct_json, sacct_text
from harpd.slurm.cli_backend import CliBackend

FIXTURE = Path(__file__).parents[2] / "fixtures" / "sacct" / "22.05-user-null.json"
ME = pwd.getpwuid(__import__("os").getuid())


def test_the_recorded_shape_has_no_user_and_the_parser_says_so():
    jobs = sacct_json.parse_json(FIXTURE.read_text(), where="fixture")
    assert len(jobs) == 1 and jobs[0].user is None  # nothing in this JSON names the owner


def test_the_json_uid_names_the_owner_through_passwd():
    assert sacct_json.owner_name({"user": None, "uid": ME.pw_uid}) == ME.pw_name
    assert sacct_json.owner_name({"user": None, "association": {"user": "carol"}}) == "carol"
    assert sacct_json.owner_name({"user": None, "uid": 4242421}) == "4242421"  # no passwd entry: the uid
    assert sacct_json.owner_name({"user": None}) is None


def test_sacct_p_user_else_uid():
    text = f"7|alice|1000\n8||{ME.pw_uid}\n8.batch||{ME.pw_uid}\n9||4242421\n10||\n"
    assert sacct_text.owners_of_parsable(text) == {"7": "alice", "8": ME.pw_name, "9": "4242421"}


def test_the_backend_fills_a_null_owner_from_sacct_p():
    calls = []

    class Backend(CliBackend):
        def _run(self, name, args, **kw):
            calls.append(args)
            if "--json" in args:
                return FIXTURE.read_text()
            return "7|dave|1234\n"

    jobs = Backend()._sacct_json(["--jobs", "7"])
    assert [j.user for j in jobs] == ["dave"]
    assert any("JobIDRaw,User,UID" in a for a in calls[1])
