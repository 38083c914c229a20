"""A HARP_CONFIG naming a missing file is said once, and the job still goes in."""

from __future__ import annotations

from harp_submit import client

JOB = "#!/bin/bash\n#SBATCH --time=10\nsrun ./a.out\n"


def test_missing_harp_config_is_one_stderr_line_and_the_job_is_submitted(run) -> None:
    run.write("job.sh", JOB)
    missing = str(run.home / "etc" / "harpd.toml")
    proc = run("job.sh", env={"HARP_SOCKET": None, "HARP_CONFIG": missing})
    assert proc.returncode == 0 and proc.stdout == b"Submitted batch job 4242\n"
    assert [c["argv"] for c in run.calls()] == [["job.sh"]]
    about = [x for x in proc.stderr.decode().splitlines() if "HARP_CONFIG" in x]
    assert len(about) == 1, proc.stderr
    assert missing in about[0] and client.DEFAULT_SOCKET in about[0] and about[0].startswith("harp: ")


def test_no_word_when_harp_socket_makes_the_config_irrelevant(run, harpd) -> None:
    run.write("job.sh", JOB)
    proc = run("job.sh", env={"HARP_CONFIG": str(run.home / "missing.toml")})
    assert proc.returncode == 0 and b"HARP_CONFIG" not in proc.stderr


def test_socket_choice_names_the_problem(tmp_path) -> None:
    missing = str(tmp_path / "nope.toml")
    path, problem = client.socket_choice({"HARP_CONFIG": missing})
    assert path == client.DEFAULT_SOCKET and problem is not None
    assert problem.startswith(f"HARP_CONFIG={missing}") and client.DEFAULT_SOCKET in problem
    assert client.socket_choice({"HARP_CONFIG": missing, "HARP_SOCKET": "/s.sock"}) == ("/s.sock", None)
    good = tmp_path / "harpd.toml"
    good.write_text('[server]\nsocket = "/srv/h.sock"\n')
    assert client.socket_choice({"HARP_CONFIG": str(good)}) == ("/srv/h.sock", None)
    bad = tmp_path / "bad.toml"
    bad.write_text("[server\nsocket = \n")
    path, problem = client.socket_choice({"HARP_CONFIG": str(bad)})
    assert path == client.DEFAULT_SOCKET and problem is not None and "TOML" in problem
