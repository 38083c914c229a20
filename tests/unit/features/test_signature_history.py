"""Signature normalisation and per-group history features."""

from __future__ import annotations

import math

import pytest

from harpd.features.history import COL, FEATURE_NAMES, History, conformal_group, keys_of
from harpd.features.signature import normalise_commands, signature_of


def test_numbers_and_paths_stripped():
    a = ["module load gcc/12", "cd /scratch/run1", "srun -n 64 ./lmp_mpi -in in.melt.3"]
    b = ["module load gcc/13", "cd /scratch/run2", "srun -n 128 ./lmp_mpi -in in.melt.9"]
    assert signature_of(a) == signature_of(b)
    assert normalise_commands(a) == "lmp_mpi"


def test_different_programs_differ():
    assert signature_of("srun ./a.out") != signature_of("srun ./b.out")
    assert signature_of("python train.py") != signature_of("python eval.py")


def test_interpreters_keep_script_and_module():
    assert normalise_commands("python3.11 -u train.py --lr 0.1") == "python train.py"
    assert normalise_commands("python -m torch.distributed.run x.py") == "python -m torch.distributed.run"


def test_env_prefix_launchers_and_chains():
    n = normalise_commands("OMP_NUM_THREADS=4 mpirun -np 8 /opt/gmx/bin/gmx_mpi mdrun && echo done")
    assert n == "gmx_mpi"
    assert normalise_commands(["#!/bin/bash", "#SBATCH -t 10", "", "echo hi"]) == ""


def test_empty_and_string_input():
    assert signature_of("") == "sig:empty"
    assert signature_of("srun x\nsrun x") == signature_of(["srun x"])
    assert signature_of("unbalanced 'quote").startswith("sig:")


def _k(user="u", ref=1000.0, cores=4, sig="s1"):
    return keys_of(user, None, sig, None, ref, cores)


def test_history_features_relative_to_current_request():
    h = History()
    k = _k(ref=1000.0)
    for used in (100.0, 200.0, 300.0):
        h.add(k, used, 1000.0, False, t_end=10.0)
    f = h.features(_k(ref=2000.0), now=20.0)
    assert len(f) == len(FEATURE_NAMES)
    lref = math.log(2000.0)
    assert f[COL["u_last"]] == pytest.approx(math.log(300.0) - lref)
    assert f[COL["u_mean2"]] == pytest.approx(math.log(250.0) - lref)  # Tsafrir: mean of last two
    assert f[COL["u_max5"]] == pytest.approx(math.log(300.0) - lref)
    assert f[COL["u_rmax5"]] == pytest.approx(math.log(0.3))  # ALEA: max used/requested
    assert f[COL["u_n"]] == pytest.approx(math.log1p(3))
    assert f[COL["u_age"]] == pytest.approx(math.log1p(10.0))
    # identical-request group: only the 1000 s request had history
    assert f[COL["r_n"]] == 0.0 and math.isnan(f[COL["r_last"]])
    assert h.count(_k(ref=1000.0), "r") == 3 and h.count(_k(ref=2000.0), "r") == 0


def test_censored_share_and_pending():
    h = History()
    k = _k()
    h.add(k, 1000.0, 1000.0, True)
    h.add(k, 10.0, 1000.0, False)
    h.submitted(k, 5.0)
    h.submitted(k, 6.0)
    f = h.features(k, now=7.0)
    assert f[COL["u_cens"]] == pytest.approx(0.5)
    assert f[COL["log_pending"]] == pytest.approx(math.log1p(2))
    assert f[COL["log_gap"]] == pytest.approx(math.log1p(1.0))
    h.finished(k)
    assert h.features(k, now=7.0)[COL["log_pending"]] == pytest.approx(math.log1p(1))


def test_keeps_bounded_memory():
    h = History()
    k = _k()
    for i in range(1000):
        h.add(k, float(i + 1), 2000.0, False)
    runs = h.groups[k.user]
    assert runs.n == 1000 and len(runs.used) <= 64
    assert h.features(k, None)[COL["u_last"]] == pytest.approx(math.log(1000.0) - math.log(1000.0))


def test_account_stands_in_for_missing_user():
    k = keys_of(None, "acct7", None, None, 100.0, 1)
    assert k.user == "acct:acct7"


def test_conformal_group_buckets():
    assert conformal_group("p", math.log1p(0)) == "p0|p"
    assert conformal_group(None, math.log1p(5)) == "p1|?"
    assert conformal_group("x", math.log1p(50)) == "p2|x"
    assert conformal_group("x", math.log1p(500)) == "p3|x"
