"""Cores for single-task jobs: the rule, the live decision, the replay figures."""

from __future__ import annotations

import pytest

from harpd.config import HarpSettings
from harpd.evaluate.cores_replay import replay_cores
from harpd.predict.cores import (
    CoresHistory,
    cores_to_give,
    cores_used,
    cut_bounds,
    order_index,
    quantile_bound,
    step_cpus,
)
from harpd.predict.live import ModelPredictor
from harpd.protocol import JobRequest
from harpd.records import JobRecord, Outcome
from harpd.store import Store

T0 = 1_700_000_000.0


def _runs(
    n: int,
    used_cores: float = 1.0,
    req_cpus: int = 4,
    sig: str = "sig-threads",
    elapsed: float = 600.0,
    gap: float = 1000.0,
) -> list[JobRecord]:
    """``n`` finished runs of one program, each ``elapsed`` s keeping ``used_cores`` busy of ``req_cpus``."""
    return [
        JobRecord(
            job_id=str(i),
            source="slurm",
            user="alice",
            account="a",
            partition="cpu",
            signature=sig,
            submit_time=T0 + gap * i,
            start_time=T0 + gap * i,
            end_time=T0 + gap * i + elapsed,
            used_time_s=elapsed,
            used_cpu_s=used_cores * elapsed,
            req_time_s=3600.0,
            req_cpus=req_cpus,
            req_mem_mb=8192.0,
            used_mem_mb=7000.0,
            outcome=Outcome.COMPLETED,
        )
        for i in range(n)
    ]


@pytest.fixture
def predictor(tmp_path):
    opened: list[Store] = []

    def make(records: list[JobRecord], **predict) -> ModelPredictor:
        s = HarpSettings(store={"path": str(tmp_path / f"h{len(opened)}.db")}, predict=predict)
        st = Store.open(s.store.path)
        st.insert_jobs(records)
        opened.append(st)
        return ModelPredictor(s, store=st)

    yield make
    for st in opened:
        st.close()


def _job(sig: str = "sig-threads", commands: tuple[str, ...] = (), **request) -> JobRequest:
    return JobRequest(
        partition="cpu", signature=sig, commands=list(commands), request={"time_s": 3600, "cpus_per_task": 4, **request}
    )


# -- the rule -----------------------------------------------------------------------


def test_the_quantile_needs_enough_runs_for_its_guarantee():
    assert order_index(18, 0.05) is None and order_index(19, 0.05) == 19
    assert quantile_bound([1.0] * 18, 0.05) is None
    runs = [1.0] * 38 + [3.0, 3.5]  # 40 runs: the 39th smallest bounds the next with 95 %
    assert quantile_bound(runs, 0.05) == 3.0


def test_cores_are_rounded_up_never_above_the_request():
    assert cores_to_give(4, 0.98) == 1 and cores_to_give(4, 1.02) == 1  # accounting noise over one core is one core
    assert cores_to_give(4, 1.3) == 2 and cores_to_give(4, 3.9) is None
    assert cores_to_give(1, 0.1) is None and cores_to_give(4, None) is None
    assert cores_used(1200.0, 600.0) == 2.0 and cores_used(10.0, 0.0) is None and cores_used(None, 5.0) is None


def test_a_tolerance_gives_the_fewest_cores_that_slow_the_bound_run_at_most_that_much():
    # runs that keep 5.0-5.14 of 6 cores busy: no tolerance keeps 6; 5 % lets 5.14 run on 5 (2.8 % longer)
    assert cores_to_give(6, 5.14) is None and cores_to_give(6, 5.14, 0.05) == 5
    assert cores_to_give(6, 5.5, 0.05) is None  # 10 % longer on 5 cores: kept
    assert cores_to_give(6, 2.05, 0.05) == 2 and cores_to_give(6, 2.2, 0.05) == 3


@pytest.mark.parametrize(
    "ntasks,nodes,commands,word",
    [
        (4, None, ["./a.out"], "--ntasks=4"),
        (None, 2, ["./a.out"], "--nodes=2"),
        (None, None, ["srun ./a.out"], "srun"),  # a step with no CPU count of its own
        (None, None, ["srun -c $NT ./a.out"], "srun"),  # a count harp cannot read
        (None, None, ["/usr/bin/mpirun ./a.out"], "mpirun"),
        (None, None, ["bwa mem -t $SLURM_CPUS_PER_TASK ref.fa r.fq"], "SLURM_CPUS_PER_TASK"),
        (None, None, ["export OMP_NUM_THREADS=4", "./solver"], "OMP_NUM_THREADS"),
    ],
)
def test_jobs_harp_must_not_shrink_say_why(ntasks, nodes, commands, word):
    why, _ = cut_bounds(ntasks, nodes, commands)
    assert why is not None and word in why
    assert cut_bounds(1, 1, ["python train.py --epochs 3"]) == (None, 1)


def test_a_snakemake_job_keeps_its_cpus_its_hidden_job_step_asks_for_them():
    wrap = "python -m snakemake --snakefile Snakefile --target-jobs 'work:s=s1' --cores all"
    why, _ = cut_bounds(1, 1, [wrap], manager="snakemake")
    assert why is not None and "Snakemake" in why and "srun --cpus-per-task" in why


@pytest.mark.parametrize(
    "commands,floor",
    [
        (["srun -c 2 ./a.out"], 2),
        (["srun -n1 --cpus-per-task=2 python x.py"], 2),
        (["srun --cpus-per-task 3 ./a", "srun -c2 ./b"], 3),  # the largest step bounds the cut
        (["srun -n 2 -c 2 ./a.out"], 4),
        (["mpirun -np 3 ./a.out"], 3),
        (["cat x | srun -c 2 ./a.out && echo done"], 2),
        (["srun -c 2 python3 -c 'print(20)'"], 2),  # the program's own -c is not the launcher's
        (["srun --mpi=none -N1 -c 2 --label ./a.out -n 9"], 2),
    ],
)
def test_a_launcher_with_an_explicit_cpu_count_bounds_the_cut_from_below(commands, floor):
    assert cut_bounds(None, None, commands) == (None, floor)


def test_step_cpus_reads_only_what_the_launcher_says():
    assert step_cpus("srun", ["-n", "2", "./a"]) is None  # no -c: a step's CPUs harp cannot know
    assert step_cpus("srun", ["-c", "x", "./a"]) is None
    assert step_cpus("aprun", ["-n", "2"]) is None
    assert step_cpus("mpiexec", ["-n", "4", "./a"]) == 4
    assert step_cpus("srun", ["--mem", "1G", "./a", "-c", "2"]) is None  # -c after the program is the program's


def test_pooled_ratios_count_only_young_signatures_and_scale_their_most():
    h = CoresHistory()
    for k in range(10):  # ten young programs whose second run used up to 1.5 x their first
        h.add(f"y{k}", 1.0)
        h.add(f"y{k}", 1.0 + 0.05 * k)
    assert h.pooled_factor(0.05) is None  # 10 ratios: the 95 % order statistic needs 19
    for k in range(10, 20):
        h.add(f"y{k}", 1.0)
        h.add(f"y{k}", 1.0)
    assert h.pooled_factor(0.05) == pytest.approx(1.45)  # the 19th smallest of 20 ratios
    for _ in range(40):
        h.add("old", 1.0)  # its first 18 add ratios of 1; later runs are not young at alpha 0.05
    assert h.pooled_factor(0.05) == pytest.approx(1.45)  # the 38th of 38
    only_old = CoresHistory()
    for _ in range(40):
        only_old.add("old", 1.0)
    assert only_old.pooled_factor(0.05) is None  # 18 young ratios only, whatever its later runs
    h.add("new", 2.0)
    assert h.bound_and_source("new", 0.05) == (pytest.approx(2.9), "pooled")  # 1.45 x its most
    assert h.bound_and_source("old", 0.05)[1] == "own" and h.bound_and_source("none", 0.05) == (None, "none")
    assert h.decide("new", 4, 0.05)[0] == 3 and h.decide("new", 3, 0.05)[0] is None


def test_history_keeps_the_request_until_it_has_the_runs_it_needs():
    h = CoresHistory()
    for _ in range(10):
        h.add("s", 1.0)
    cores, ex = h.decide("s", 4, 0.05)
    assert cores is None and "19 needed" in ex["reason"]


# -- the live decision --------------------------------------------------------------------


def test_a_four_core_job_whose_runs_used_one_gets_one_core(predictor):
    d = predictor(_runs(25)).decide(_job(mem_mb=8192), "alice", 1000)
    by = {c.option: c for c in d.changes}
    assert by["cpus-per-task"].value == "1" and by["cpus-per-task"].old == "4"
    assert d.explain["cores"]["n_history"] == 25


def test_mem_per_cpu_becomes_a_total_that_does_not_shrink(predictor):
    # 25 runs that used 7000 of 8192 MiB: no memory cut; cores lowered to 1
    d = predictor(_runs(25)).decide(_job(mem_per_cpu_mb=2048), "alice", 1000)
    by = {c.option: c for c in d.changes}
    assert by["cpus-per-task"].value == "1"
    assert "mem-per-cpu" not in by
    assert by["mem"].value in ("8G", "8192M")  # 2048 MiB x 4 CPUs, as a total


def test_mem_per_cpu_cut_by_the_memory_rule_is_a_total_of_the_job(predictor):
    runs = _runs(25)
    for r in runs:
        r.used_mem_mb = 1000.0
    d = predictor(runs).decide(_job(mem_per_cpu_mb=2048), "alice", 1000)
    by = {c.option: c for c in d.changes}
    assert by["cpus-per-task"].value == "1" and "mem-per-cpu" not in by
    from harp_submit.units import parse_mem

    assert 1000 < parse_mem(by["mem"].value) < 8192  # sized as the job's total, not per remaining CPU


def test_mpi_jobs_and_short_histories_keep_their_cores(predictor):
    for p, job in (
        (predictor(_runs(25)), _job(ntasks=4)),
        (predictor(_runs(25)), _job(commands=("srun ./a.out",))),
        (predictor(_runs(5, sig="sig-young")), _job(sig="sig-young")),
    ):  # 4 pooled ratios: too few
        d = p.decide(job, "alice", 1000)
        assert "cpus-per-task" not in {c.option for c in d.changes}, d.explain["cores"]


def test_a_young_program_is_bounded_by_its_runs_and_the_pooled_ratios(predictor):
    # 25 runs of a steady program pooled 18 ratios of 1 (its first 18 runs were young): with its 5, enough
    d = predictor(_runs(25) + _runs(5, sig="sig-young")).decide(_job(sig="sig-young"), "alice", 1000)
    by = {c.option: c for c in d.changes}
    assert by["cpus-per-task"].value == "1" and d.explain["cores"]["bound_from"] == "pooled"


def test_cores_the_runs_used_are_given(predictor):
    d = predictor(_runs(25, used_cores=2.6)).decide(_job(), "alice", 1000)
    by = {c.option: c for c in d.changes}
    assert by["cpus-per-task"].value == "3"


def test_the_site_tolerance_reaches_the_live_decision_and_its_reason(predictor):
    runs = _runs(25, used_cores=5.1, req_cpus=6)
    job = _job(cpus_per_task=6)
    strict = predictor(runs, cores_tolerance=0).decide(job, "alice", 1000)
    assert "cpus-per-task" not in {c.option for c in strict.changes}
    d = predictor(runs).decide(job, "alice", 1000)  # the default: 0.05 (#27)
    by = {c.option: c for c in d.changes}
    assert by["cpus-per-task"].value == "5" and "at most 5% slower on 5" in by["cpus-per-task"].reason


def test_a_job_slowed_within_the_tolerance_keeps_a_time_request_that_holds_the_slowdown(predictor):
    """Under hard limits harp keeps the time (hard_cut_gain 0): 10-minute runs of a 1-hour request hold 5.1 / 5."""
    runs = _runs(25, used_cores=5.1, req_cpus=6)
    d = predictor(runs).decide(_job(cpus_per_task=6), "alice", 1000)
    by = {c.option: c for c in d.changes}
    assert by["cpus-per-task"].value == "5" and "time" not in by  # harp never raises a time request
    assert d.explain["cores"]["slowdown"] == pytest.approx(1.02)
    assert "the time request holds a run 2.0% slower" in d.explain["time"]["slowdown_held"]


def test_a_time_request_that_may_not_hold_the_slowdown_keeps_the_cores(predictor):
    # runs of 59.5 of the 60 minutes asked: 2% slower would not fit, and harp never raises the request
    runs = _runs(25, used_cores=5.1, req_cpus=6, elapsed=3570.0)
    d = predictor(runs).decide(_job(cpus_per_task=6), "alice", 1000)
    assert {c.option for c in d.changes} == set()
    assert "never raises it" in d.explain["cores"]["tolerance_dropped"]


def test_a_cut_time_limit_includes_the_slowdown(predictor):
    runs = _runs(25, used_cores=5.1, req_cpus=6)
    plain = predictor(runs, hard_cut_gain=1.0, cores_tolerance=0).decide(_job(cpus_per_task=6), "alice", 1000)
    slowed = predictor(runs, hard_cut_gain=1.0).decide(_job(cpus_per_task=6), "alice", 1000)
    t0 = {c.option: c for c in plain.changes}["time"].value
    t1 = {c.option: c for c in slowed.changes}["time"].value
    from harp_submit.units import parse_duration_s

    assert parse_duration_s(t1) >= parse_duration_s(t0) * 1.02 > parse_duration_s(t0)


def test_without_room_in_the_time_limit_the_cores_slow_nothing(predictor):
    runs = _runs(25, used_cores=5.1, req_cpus=6)
    no_time = JobRequest(partition="cpu", signature="sig-threads", request={"cpus_per_task": 6})
    d = predictor(runs).decide(no_time, "alice", 1000)
    assert {c.option for c in d.changes} == set()
    assert "may not hold a run made slower" in d.explain["cores"]["tolerance_dropped"]


def test_allow_shrink_off_keeps_the_cores(predictor):
    d = predictor(_runs(25), allow_shrink=False).decide(_job(), "alice", 1000)
    assert "cpus-per-task" not in {c.option for c in d.changes}


# -- the replay figures -------------------------------------------------------------------


def test_replay_counts_core_hours_and_slowed_jobs():
    runs = _runs(30) + _runs(1, used_cores=3.0, sig="sig-threads")
    runs[-1].job_id, runs[-1].submit_time = "late", T0 + 1_000_000.0
    runs[-1].end_time = runs[-1].submit_time + 600.0
    r = replay_cores(runs, 0.05)
    m = r.multi
    assert m.jobs == 31 and m.changed >= 1 and m.slowed == 1  # the 3-core run got 1 core
    assert m.harp_core_h < m.users_core_h
    assert m.users_core_h == pytest.approx(31 * 4 * 600 / 3600)
    assert m.used_core_h == pytest.approx((30 * 1 + 3) * 600 / 3600)
    # the first 19 finished runs are needed before any job is given fewer cores
    assert m.changed == 31 - 19


def _waiting(n_before: int, n_pending: int, state: str = "nextflow:COMPLETED") -> list[JobRecord]:
    """``n_before`` runs all submitted at T0 (one after the other ends), then ``n_pending`` submitted at T0 too
    that start only after every earlier run has ended: a workflow's samples submitted together."""
    runs = _runs(n_before + n_pending)
    for i, r in enumerate(runs):
        r.state = state
        r.submit_time = T0
        r.start_time = T0 + 1000.0 * i
        r.end_time = r.start_time + 600.0
    return runs


def test_replay_re_sizes_a_waiting_task_at_its_start_as_harpds_resizer_does():
    runs = _waiting(19, 5)  # 19 finished before the last 5 start: enough for the quantile
    at_submit = replay_cores(runs, 0.05, at="submit").multi
    at_start = replay_cores(runs, 0.05).multi
    assert at_submit.changed == 0  # all submitted together, before any run ended
    assert at_start.changed == 5 and at_start.harp_core_h == pytest.approx((19 * 4 + 5 * 1) * 600 / 3600)
    with pytest.raises(ValueError, match="unknown decision time"):
        replay_cores(runs, 0.05, at="end")


def test_replay_re_sizes_a_waiting_job_once_and_only_a_workflow_task_it_kept():
    runs = _waiting(19, 1)
    late = runs[-1]
    late.start_time = T0 + 1000.0 * 40  # waits while 20 more finish, after the 19th
    late.end_time = late.start_time + 600.0
    more = _runs(20, used_cores=3.0)  # these use 3 cores: the bound rises after the first re-size
    for k, r in enumerate(more):
        r.job_id, r.state = f"more{k}", "nextflow:COMPLETED"
        r.submit_time = r.start_time = T0 + 1000.0 * (19 + k) + 1.0
        r.end_time = r.start_time + 600.0
    late.used_cpu_s = 3.0 * 600.0  # it keeps 3 cores busy: slowed on 1, not on the 3 a later answer gives
    without = replay_cores(runs[:-1] + more, 0.05).multi.slowed
    # re-sized to 1 core at the 19th outcome and never again (one resize-cpus per job and time limit)
    assert replay_cores(runs + more, 0.05).multi.slowed == without + 1
    plain = _waiting(19, 1, state="COMPLETED")  # not a workflow task, and harp kept its cores at submission
    assert replay_cores(plain, 0.05).multi.changed == 0


# -- harp replay --resource cpus -----------------------------------------------------------

NF_HEAD = "task_id,process,name,status,exit,attempt,cpus,memory,time,realtime,%cpu,peak_rss,submit,start,complete"


def _nextflow_trace(path, n: int = 40, pct: str = "95.0"):
    """``n`` tasks of one process asking 4 CPUs and keeping ``pct`` % of one busy, each finished before the next."""
    rows, t = [NF_HEAD], 1_700_000_000_000
    for i in range(n):
        rows.append(
            f"{i + 1},WF:THREADS,WF:THREADS ({i}),COMPLETED,0,1,4,1000000000,3600000,600000,{pct},"
            f"500000000,{t},{t + 1000},{t + 601000}"
        )
        t += 700_000
    path.write_text("\n".join(rows) + "\n")
    return path


def test_cli_replays_cores_of_a_nextflow_trace(tmp_path, capsys, cfg):
    import json

    from harpd.cli.main import main as harp

    p = _nextflow_trace(tmp_path / "wf.trace.csv")
    assert harp(["replay", str(p), "--resource", "cpus", "--format", "json"]) == 0
    rep = json.loads(capsys.readouterr().out)["multi_cpu"]
    assert rep["jobs"] == 40 and rep["changed"] == 40 - 19 and rep["slowed"] == 0
    assert rep["users_core_h"] == pytest.approx(40 * 4 * 600 / 3600, abs=1e-3)
    assert rep["harp_core_h"] == pytest.approx((19 * 4 + 21 * 1) * 600 / 3600, abs=1e-3)
    assert harp(["replay", str(p), "--resource", "cpus"]) == 0
    assert "asked for > 1 CPU" in capsys.readouterr().out


def test_cli_cores_replay_without_cpu_time_is_one_line(tmp_path, capsys, cfg):
    from harpd.cli.main import main as harp

    p = _nextflow_trace(tmp_path / "wf.trace.csv", pct="-")
    assert harp(["replay", str(p), "--resource", "cpus"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no job with CPU time" in err and "Traceback" not in err


def test_the_replay_counts_as_slowed_only_tasks_slowed_beyond_the_tolerance():
    from harpd.evaluate.cores_replay import CoreFigures

    f = CoreFigures(tolerance=0.05)
    f.add(6, 5, 5.1, 600.0)  # 2 % longer on 5: within the tolerance, its time limit holds it
    f.add(6, 5, 5.5, 600.0)  # 10 % longer: slowed
    f.add(6, 6, 5.9, 600.0)  # given what it asked: never slowed by harp
    assert (f.slowed, f.slowed_at_all, f.slowed_share) == (1, 2, pytest.approx(1 / 3))
    assert CoreFigures().tolerance == 0.0


def test_the_share_of_its_time_request_a_program_takes_bounds_a_slower_run():
    from harpd.predict.cores import CoresHistory

    h = CoresHistory()
    assert h.time_share_bound("s", 0.05, 1.1) is None  # no run: nothing says a slower run fits
    for share in (0.2, 0.3, 0.25):
        h.add("s", 5.0, share)
    assert h.time_share_bound("s", 0.05, 1.1) == pytest.approx(0.33)  # young: the most times the margin
    for _ in range(60):
        h.add("s", 5.0, 0.1)
    # conformal once 19 runs or more: the ceil(64 x 0.95) = 61st smallest of 63
    assert h.time_share_bound("s", 0.05, 1.1) == pytest.approx(0.2)
