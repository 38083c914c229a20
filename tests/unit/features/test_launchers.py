"""The launcher parser never takes a launcher option's value for the program (#51)."""

from __future__ import annotations

import shlex

from hypothesis import given, settings
from hypothesis import strategies as st

from harpd.features.launchers import _TABLES, program_start
from harpd.features.signature import normalise_commands, signature_of

SUBMITIT = (
    "srun --unbuffered --output /home/u/logs/%j_%t_log.out --error /home/u/logs/%j_%t_log.err "
    "python -u -m submitit.core._submit /home/u/logs"
)


def test_submitit_srun_line_is_its_python_module_not_its_log_path():
    assert normalise_commands(SUBMITIT) == "python -m submitit.core._submit"
    array = SUBMITIT.replace("%j", "%A_%a")
    assert normalise_commands(array) == "python -m submitit.core._submit"


def test_value_options_long_short_and_attached():
    for line in (
        "srun -o out.txt -n 4 lmp -in x",
        "srun --output=out.txt -n4 lmp -in x",
        "srun -J name --mem 4G --cpu-bind cores lmp",
        "srun --export ALL,X=1 -- lmp",
        "mpirun -np 8 --map-by ppr:4:node -x OMP_NUM_THREADS --hostfile hosts lmp",
        "mpiexec -n 4 -genv I_MPI_DEBUG 5 lmp",
        "numactl --interleave all lmp",
        "time -f %e lmp",
    ):
        assert normalise_commands(line) == "lmp", line


def test_positional_arguments_of_wrappers():
    assert normalise_commands("taskset -c 0-3 ./a.out") == "a.out"
    assert normalise_commands("taskset 0x3 ./a.out") == "a.out"
    assert normalise_commands("timeout -s INT 10m python x.py") == "python x.py"
    assert normalise_commands("apptainer exec --bind /d:/d img.sif python z.py") == "python z.py"


def test_python_options_and_modules():
    assert normalise_commands("python -W ignore train.py") == "python train.py"
    assert normalise_commands("python -mtorch.distributed.run x.py") == "python -m torch.distributed.run"
    assert normalise_commands("python -c 'print(1)'") == "python -c"
    assert normalise_commands("bash -c 'srun -N 2 python y.py'") == "python y.py"


def test_unknown_option_followed_by_a_pattern_is_a_value():
    assert normalise_commands("srun --not-an-option %x.out prog") == "prog"
    assert normalise_commands("srun --not-an-option prog") == "prog"


_words = st.text(st.characters(blacklist_categories=("Cs",)), min_size=0, max_size=12)
_value = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="-\x00"), min_size=1, max_size=20)


@settings(max_examples=300, deadline=None)
@given(
    launcher=st.sampled_from(["srun", "mpirun", "mpiexec", "numactl", "torchrun"]),
    data=st.data(),
    value=_value,
)
def test_any_value_of_a_value_option_is_skipped(launcher, data, value):
    option = data.draw(st.sampled_from(sorted(_TABLES[launcher] - {"-genv", "-env"})))  # NAME VALUE: two words
    tokens = [launcher, option, value, "/opt/bin/myprog", "--x", "1"]
    assert program_start(tokens, 0) == 3
    if not set(value) & set("|;&#\n\r"):  # the command separators harp splits lines at first
        assert normalise_commands(shlex.join(tokens)) == "myprog"


@settings(max_examples=300, deadline=None)
@given(st.lists(_words, max_size=12), st.integers(min_value=0, max_value=11))
def test_hostile_words_never_raise(words, start):
    """Any words, any launcher position: an index in range, and a signature."""
    tokens = ["srun", *words]
    i = program_start(tokens, 0)
    assert 1 <= i <= len(tokens)
    assert signature_of(" ".join(words)).startswith("sig:")
    assert isinstance(normalise_commands(shlex.join(tokens)), str)
