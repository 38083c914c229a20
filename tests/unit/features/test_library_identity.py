"""A Python job library's job is its folder and function, read without unpickling (#51)."""

from __future__ import annotations

import json
import os
import pickle
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harp_submit.library_job import function_of_pickle, submitit_function
from harpd.features.workflow import identify, job_signature

FOLDER = "/home/u/logs/%j"
LINE = f"srun --unbuffered --output {FOLDER}/%j_%t_log.out python -u -m submitit.core._submit {FOLDER}"


class DelayedSubmission:
    """Pickles as submitit's does (a ``function`` first in its state), without submitit."""

    def __init__(self, function, *args):
        self.function = function
        self.args = args
        self.kwargs = {}


def _pickled(function, *args) -> bytes:
    return pickle.dumps(DelayedSubmission(function, *args), protocol=4)


def test_a_referenced_function_is_its_module_and_name():
    assert function_of_pickle(_pickled(os.path.join, "a")) in ("posixpath:join", "ntpath:join")
    assert function_of_pickle(_pickled(json.dumps, [1, 2])) == "json:dumps"  # args never read as the function


def test_cloudpickles_copy_of_a_main_function_is_its_qualname():
    cloudpickle = pytest.importorskip("cloudpickle")

    def inner(x):
        return x

    # a nested function is copied by value, as a function of a script's __main__ is: its globals name its module
    data = cloudpickle.dumps(DelayedSubmission(inner, 3))
    assert function_of_pickle(data) == f"{__name__}:{inner.__qualname__}"


class _Evil:
    def __reduce__(self):
        return (os.system, ("touch /tmp/harp-evil-ran",))


def test_a_hostile_pickle_is_never_run(tmp_path):
    marker = "/tmp/harp-evil-ran"
    if os.path.exists(marker):
        os.unlink(marker)
    data = _pickled(_Evil())
    got = function_of_pickle(data)
    assert not os.path.exists(marker)
    assert got in ("posix:system", "nt:system")  # named, not called


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=400))
def test_any_bytes_are_no_function_or_a_clean_name(data):
    got = function_of_pickle(data)
    assert got is None or (":" in got and len(got) <= 401 and "\n" not in got)


def test_truncated_pickle_is_no_function():
    data = _pickled(os.path.join)
    assert function_of_pickle(data[: data.index(b"function") + 4]) is None


def test_submitit_function_reads_the_newest_pickle_beside_the_submission_file(tmp_path):
    script = tmp_path / (".submission_file_" + "a" * 32 + ".sh")
    script.write_text("#!/bin/bash\n")
    old = tmp_path / ("b" * 32 + ".pkl")
    old.write_bytes(_pickled(json.loads))
    new = tmp_path / ("c" * 32 + ".pkl")
    new.write_bytes(_pickled(json.dumps))
    os.utime(old, (time.time() - 100, time.time() - 100))
    (tmp_path / "123_submitted.pkl").write_bytes(_pickled(os.path.join))  # a submitted job's: not this one
    assert submitit_function(str(script), [LINE]) == "json:dumps"
    assert submitit_function(str(script), ["python train.py"]) is None  # not submitit's command
    assert submitit_function(str(tmp_path / "job.sh"), [LINE]) is None  # not submitit's script
    assert submitit_function(str(tmp_path / "missing" / script.name), [LINE]) is None


def test_two_functions_in_one_folder_are_apart_and_one_function_is_one_history():
    a = job_signature([LINE], "submitit", ".submission_file_x.sh", "/home/u", "train:small")
    b = job_signature([LINE], "submitit", ".submission_file_y.sh", "/home/u", "train:big")
    a2 = job_signature([LINE], "submitit", ".submission_file_z.sh", "/elsewhere", "train:small")
    other = job_signature([LINE.replace("/home/u/logs", "/home/u/other")], "submitit", None, "/home/u", "train:small")
    assert a != b and a == a2 and a != other
    assert a is not None and a.startswith("wf:")


def test_without_a_function_the_job_name_stands_for_it():
    task = identify([LINE], "my-experiment", None, "/home/u")
    assert task is not None and (task.manager, task.workflow, task.task) == ("submitit", FOLDER, "my-experiment")
    assert not task.manager_retries  # submitit never submits a failed function again itself
    assert identify(["python -m submitit.core._submit"], "x", None, "/w") is None  # no folder: no identity


def test_a_name_longer_than_harpd_takes_is_no_function(tmp_path):
    script = tmp_path / (".submission_file_" + "a" * 32 + ".sh")
    script.write_text("#!/bin/bash\n")
    data = _pickled(json.dumps).replace(b"\x8c\x05dumps", b"\x8c\xc8" + b"d" * 200)
    (tmp_path / ("c" * 32 + ".pkl")).write_bytes(data)
    assert function_of_pickle(data) == "json:" + "d" * 200
    assert submitit_function(str(script), [LINE]) == "json:" + "d" * 200
    data = data.replace(b"\x8c\x04json", b"\x8c\x3c" + b"j" * 60)
    (tmp_path / ("c" * 32 + ".pkl")).write_bytes(data)
    assert function_of_pickle(data) == "j" * 60 + ":" + "d" * 200
    assert submitit_function(str(script), [LINE]) is None  # 261 characters: more than harpd's protocol takes
