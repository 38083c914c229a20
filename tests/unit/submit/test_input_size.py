"""The job's input size at submission: regular files named or staged, bounded, never read."""

from __future__ import annotations

import os

import pytest

from harp_submit import input_size
from harp_submit.input_size import input_bytes


@pytest.fixture
def files(tmp_path):
    (tmp_path / "reads.fq").write_bytes(b"x" * 1000)
    (tmp_path / "ref.fa").write_bytes(b"y" * 300)
    (tmp_path / "adir").mkdir()
    os.symlink(tmp_path / "reads.fq", tmp_path / "same.fq")
    return tmp_path


def test_regular_files_named_on_command_lines_are_summed_once(files):
    cmds = ["bwa mem ref.fa reads.fq > out.sam", "cat same.fq adir missing.txt --index=ref.fa $HOME/x"]
    # ref.fa and reads.fq; same.fq is reads.fq again; a directory, a missing file and variables count nothing
    assert input_bytes(cmds, str(files), "job.sh") == 1300


def test_option_values_and_absolute_paths_count(files):
    assert input_bytes([f"prog --in={files}/reads.fq"], "/", "job.sh") == 1000
    assert input_bytes(["./ref.fa"], str(files), "job.sh") == 0  # the program itself is no input
    assert input_bytes(["echo hello"], str(files), "job.sh") == 0


def test_a_nextflow_task_counts_the_files_staged_in_its_work_directory(files):
    (files / ".command.run").write_text("#!/bin/bash\n" + "x" * 5000)
    (files / ".command.sh").write_text("y" * 5000)
    # ref.fa + reads.fq + same.fq (a second name of reads.fq: once); the wrapper's own files left out
    assert input_bytes(["/bin/bash .command.run"], str(files), ".command.run") == 1300


def test_past_the_stat_bound_the_size_is_unknown(files, monkeypatch):
    cmds = ["cat " + " ".join(f"f{i}" for i in range(input_size.MAX_STATS + 1))]
    assert input_bytes(cmds, str(files), "job.sh") is None
    monkeypatch.setattr(input_size, "BUDGET_S", -1.0)  # a file system slower than the budget
    assert input_bytes(["cat reads.fq"], str(files), "job.sh") is None


def test_the_request_sends_it(files, monkeypatch):
    from harp_submit import directives
    from harp_submit.request import Request
    from harp_submit.sbatch_options import SBATCH_TABLE

    text = "#!/bin/bash\n#SBATCH -t 5\nsort reads.fq\n"
    monkeypatch.chdir(files)
    r = Request(SBATCH_TABLE.parse(["job.sh"]), {}, directives.parse(text), script_path="job.sh", script_text=text)
    assert r.job_request()["input_bytes"] == 1000


def test_an_interpreter_after_a_launcher_is_no_input(files):
    """submitit's ``srun … /path/python3 -u -m submitit.core._submit FOLDER``: the interpreter is the program (#51)."""
    (files / "bin").mkdir()
    (files / "bin" / "python3.11").write_bytes(b"p" * 7000)
    py = f"{files}/bin/python3.11"
    line = f"srun --unbuffered --output {files}/%j_%t_log.out {py} -u -m submitit.core._submit {files}"
    assert input_bytes([line], str(files), ".submission_file_0123.sh") == 0
    assert input_bytes([f"srun {files}/bin/python3.11 reads.fq"], str(files), "job.sh") == 1000
