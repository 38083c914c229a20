"""Each Slurm release's recorded output through harp's parsers.

The fixtures are real output of the local cluster (scripts/localslurm
``--slurm VER``), recorded by tests/fixtures/sacct/record.sh and
tests/fixtures/scontrol/record.sh; every release recorded there is checked
here against what the recording jobs were asked for (names, limits, memory),
so a release whose output harp misreads fails on the fields harp uses.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ingest_helpers import by_name

from harp_submit.sbatch_options import SBATCH_TABLE, GetoptError
from harpd.slurm import sacct_json, sacct_text, scontrol

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def _versions(folder: str, suffix: str) -> list[str]:
    return sorted(p.name[: -len(suffix)] for p in (FIXTURES / folder).glob(f"*{suffix}"))


SACCT_VERSIONS = _versions("sacct", "-jobs.json")
SCONTROL_VERSIONS = _versions("scontrol", "-running.txt")
SBATCH_VERSIONS = _versions("sbatch", "-errors.json")
RECORD_JOBS = {
    "fx-completed",
    "fx-timeout",
    "fx-oom",
    "fx-failed",
    "fx-cancelled",
    "fx-array",
    "fx-percpu",
    "fx-steps",
    "fx-stepoom",
    "fx-gpu",
}


def test_each_recorded_release_has_every_kind_of_fixture():
    """A release recorded only in part would leave a parser untested on it."""
    assert "22.05" in SACCT_VERSIONS
    assert SCONTROL_VERSIONS == SBATCH_VERSIONS
    assert set(SCONTROL_VERSIONS) <= set(SACCT_VERSIONS)


def _sacct(version: str) -> tuple[list, list, list]:
    d = FIXTURES / "sacct"
    return (
        sacct_json.parse_json((d / f"{version}-jobs.json").read_text()),
        sacct_text.parse_parsable2((d / f"{version}-jobs.psv").read_text()),
        sacct_text.parse_parsable2((d / f"{version}-jobs-epoch.psv").read_text()),
    )


@pytest.mark.parametrize("version", SACCT_VERSIONS)
def test_sacct_every_recorded_job_read_both_ways(version):
    from_json, from_psv, from_epoch = _sacct(version)
    for jobs in (from_json, from_psv, from_epoch):
        assert set(by_name(jobs)) == RECORD_JOBS
        assert len(by_name(jobs)["fx-array"]) == 3


@pytest.mark.parametrize("version", SACCT_VERSIONS)
def test_sacct_fields_harp_uses(version):
    """Owner, state, limits, times, memory, TRES: what each recording job asked for."""
    for jobs in _sacct(version):
        named = {k: v[0] for k, v in by_name(jobs).items()}
        done = named["fx-completed"]
        assert done.user == "root" and done.partition == "short"
        assert done.state == "COMPLETED" and (done.exit_code, done.exit_signal) == (0, 0)
        assert done.limit_s == 120.0 and done.req_mem_mb == 100.0
        assert done.req_cpus == 1 and done.alloc_cpus == 1 and done.req_nodes == 1
        assert done.submit_time <= done.start_time <= done.end_time
        assert done.elapsed_s == done.end_time - done.start_time >= 4
        batch = next(s for s in done.steps if s.step_id == "batch")
        # a 30 MiB bytearray in python: more than that, far below the 100M limit
        assert 30 < batch.max_rss_mb < 100

        timeout = named["fx-timeout"]
        assert timeout.state == "TIMEOUT" and timeout.limit_s == 60.0
        assert timeout.elapsed_s >= 60
        assert named["fx-cancelled"].state == "CANCELLED"
        assert named["fx-failed"].state == "FAILED"
        oom = named["fx-oom"]
        assert oom.state in ("FAILED", "OUT_OF_MEMORY") and oom.req_mem_mb == 100.0
        percpu = named["fx-percpu"]
        assert (percpu.req_mem_mb, percpu.req_cpus, percpu.alloc_cpus) == (300.0, 2, 2)
        gpu = named["fx-gpu"]
        assert (gpu.req_gpus, gpu.alloc_gpus) == (1, 1)
        assert [s.step_id for s in named["fx-steps"].steps] == ["batch", "0", "1"]


@pytest.mark.parametrize("version", SACCT_VERSIONS)
def test_sacct_json_and_parsable2_agree(version):
    from_json, from_psv, from_epoch = _sacct(version)
    jj = {j.job_id: j for j in from_json}
    for jobs in (from_psv, from_epoch):
        pp = {j.job_id: j for j in jobs}
        assert set(pp) == set(jj)
        for jid, p in pp.items():
            j = jj[jid]
            assert (p.user, p.state, p.limit_s, p.req_mem_mb, p.req_cpus, p.alloc_cpus, p.req_gpus) == (
                j.user,
                j.state,
                j.limit_s,
                j.req_mem_mb,
                j.req_cpus,
                j.alloc_cpus,
                j.req_gpus,
            ), jid
            assert (p.submit_time, p.start_time, p.end_time, p.elapsed_s) == (
                j.submit_time,
                j.start_time,
                j.end_time,
                j.elapsed_s,
            ), jid
            assert [s.step_id for s in p.steps] == [s.step_id for s in j.steps], jid
            for ps, js in zip(p.steps, j.steps):
                if js.max_rss_mb is not None:  # -P prints KiB
                    assert ps.max_rss_mb == pytest.approx(js.max_rss_mb, abs=1 / 1024), jid


@pytest.mark.parametrize("version", [v for v in SACCT_VERSIONS if v != "22.05"])
def test_sacct_json_keeps_the_return_code_after_2205(version):
    """22.05's JSON says SUCCESS/0 for `exit 1`; later releases keep the code."""
    from_json, from_psv, _ = _sacct(version)
    failed = by_name(from_json)["fx-failed"][0]
    assert (failed.exit_code, failed.exit_signal) == (1, 0)
    assert (by_name(from_psv)["fx-failed"][0].exit_code) == 1


def _scontrol(version: str, what: str):
    line = (FIXTURES / "scontrol" / f"{version}-{what}.txt").read_text().strip()
    kv = scontrol.parse_kv_line(line)
    return scontrol.job_info(kv), scontrol.queued_job(kv)


@pytest.mark.parametrize("version", SCONTROL_VERSIONS)
def test_scontrol_running_job(version):
    info, queued = _scontrol(version, "running")
    assert info.name == "fx-running" and info.state == "RUNNING"
    assert (info.user, info.uid) == ("harptest1", 1001)
    assert info.time_limit_s == 300 and info.mem_mb == 200 and info.mem_per_cpu_mb is None
    assert info.comment == "fx comment" and info.account == "harp" and info.restarts == 0
    assert info.requeue is True  # the cluster's JobRequeue=1 (no --no-requeue); what recovery's resume relies on
    assert queued.partition == "short" and queued.start_time is not None
    assert queued.time_used_s is not None and 0 <= queued.time_used_s < 300
    assert queued.job_id == info.job_id and queued.array_job_id is None


@pytest.mark.parametrize("version", SCONTROL_VERSIONS)
def test_scontrol_pending_job(version):
    info, queued = _scontrol(version, "pending")
    assert info.state == "PENDING" and info.reason == "BeginTime"
    assert info.time_limit_s == 90 * 60 and info.mem_per_cpu_mb == 150 and info.mem_mb is None
    assert (info.user, info.uid) == ("harptest1", 1001)
    assert queued.partition == "long" and queued.time_used_s == 0


@pytest.mark.parametrize("version", SCONTROL_VERSIONS)
def test_scontrol_finished_job(version):
    info, _ = _scontrol(version, "finished")
    assert info.state == "COMPLETED" and info.end_time is not None
    assert info.time_limit_s == 120 and info.mem_mb == 100


def _sbatch_errors(version: str) -> dict[str, dict]:
    cases = json.loads((FIXTURES / "sbatch" / f"{version}-errors.json").read_text())
    return {c["case"]: c for c in cases}


@pytest.mark.parametrize("version", SBATCH_VERSIONS)
def test_sbatch_refuses_each_recorded_case(version):
    """Every recorded case was refused, with a message (what harp-submit passes on)."""
    for name, case in _sbatch_errors(version).items():
        assert case["rc"] != 0 and case["stderr"].startswith("sbatch: "), name
    assert "time limit" in _sbatch_errors(version)["time_over_partition"]["stderr"]


@pytest.mark.parametrize("version", SBATCH_VERSIONS)
def test_harp_getopt_refuses_bad_option_in_sbatch_words(version):
    """harp-submit's own option parser says what that release's sbatch says."""
    case = _sbatch_errors(version)["bad_option"]
    with pytest.raises(GetoptError) as err:
        SBATCH_TABLE.parse(case["argv"])
    assert case["stderr"].splitlines()[0] == f"sbatch: {err.value}"


@pytest.mark.parametrize("version", SACCT_VERSIONS)
def test_sacct_json_layout_named_for_the_release(version):
    doc = json.loads((FIXTURES / "sacct" / f"{version}-jobs.json").read_text())
    assert sacct_json.json_layout(doc) == ("22.05" if version == "22.05" else "23.11+")


@pytest.mark.parametrize("version", SACCT_VERSIONS)
def test_sacct_memory_kill_is_signal_9_with_maxrss_over_the_request(version):
    """OverMemoryKill (no cgroups): FAILED 0:9, the batch step's MaxRSS above --mem."""
    for jobs in _sacct(version):
        oom = by_name(jobs)["fx-oom"][0]
        assert (oom.state, oom.exit_code, oom.exit_signal) == ("FAILED", 0, 9)
        batch = next(s for s in oom.steps if s.step_id == "batch")
        assert batch.max_rss_mb > oom.req_mem_mb


def test_scontrol_requeue_flag_unknown_is_none():
    """Requeue=0 (--no-requeue) is False; absent or garbled is unknown (None), never taken as 1."""
    for text, want in (("Requeue=0", False), ("Requeue=1", True), ("Requeue=yes", None), ("", None)):
        assert scontrol.job_info(scontrol.parse_kv_line(f"JobId=5 {text}".strip())).requeue is want, text
