"""Efficiencies as seff/reportseff define them (reportseff job.py):
TimeEff = Elapsed/Timelimit, CPUEff = TotalCPU/AllocCPUS/Elapsed, MemEff = MaxRSS/ReqMem."""

import math

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from report_helpers import job

from harpd.report.efficiency import cpu_efficiency, job_efficiencies, memory_efficiency, time_efficiency


def test_reportseff_worked_example():
    # 4 cores for 2 h wall of a 4 h limit, 6 core-hours of CPU, 3 GiB peak of 4 GiB asked
    rec = job(
        "1",
        req_time_s=4 * 3600,
        used_time_s=2 * 3600,
        alloc_cpus=4,
        used_cpu_s=6 * 3600,
        req_mem_mb=4096,
        used_mem_mb=3072,
    )
    e = job_efficiencies(rec)
    assert e["time_eff"] == 0.5
    assert e["cpu_eff"] == 0.75
    assert e["mem_eff"] == 0.75


def test_undefined_values_are_none_like_reportseff_dashes():
    e = job_efficiencies(job("1", req_time_s=None, used_time_s=0, used_cpu_s=0, req_mem_mb=None))
    assert e == {"time_eff": None, "cpu_eff": None, "mem_eff": None}


def test_alloc_cpus_falls_back_to_the_request():
    e = job_efficiencies(job("1", alloc_cpus=None, req_cpus=2, used_time_s=100, used_cpu_s=100))
    assert e["cpu_eff"] == 0.5


def test_values_above_one_are_kept():
    # OOM-killed jobs peak above ReqMem; hyper-threads give CPU eff > 1
    assert memory_efficiency(np.array([1100.0]), np.array([1000.0]))[0] == 1.1
    assert cpu_efficiency(np.array([250.0]), np.array([100.0]), np.array([2.0]))[0] == 1.25


@given(
    st.lists(
        st.tuples(st.floats(0, 1e6), st.one_of(st.none(), st.just(0.0), st.floats(1e-3, 1e6))), min_size=1, max_size=30
    )
)
def test_vector_matches_scalar_definition(pairs):
    used = np.array([p[0] for p in pairs])
    limit = np.array([np.nan if p[1] is None else p[1] for p in pairs])
    got = time_efficiency(used, limit)
    for (u, lim), g in zip(pairs, got):
        if lim is None or lim == 0:
            assert math.isnan(g)
        else:
            assert g == u / lim
