"""The call sites' one-liners move the right series, with labels from the fixed sets only."""

from __future__ import annotations

import logging
import re

import pytest
from prometheus_client import generate_latest

from harpd.daemon.refusals import RefusalLog
from harpd.metrics import record
from harpd.metrics import registry as r
from harpd.metrics.registry import REGISTRY
from harpd.protocol import Change, Decision, JobRequest, Resources


def value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def job(**request) -> JobRequest:
    return JobRequest(job_name="run", request=Resources(**request))


def test_a_changed_time_and_a_kept_memory_are_counted_with_their_reasons():
    d = Decision(
        changes=[Change(option="time", value="01:00:00", old="04:00:00", reason="gbm: time bound from 40 runs")],
        explain={
            "time": {"model": "gbm", "reason": "bound"},
            "mem": {"reason": "cold start: 2 of 5 runs needed", "n_history": 2},
            "cores": {"reason": "one CPU asked: kept"},
        },
    )
    before = {
        "changed": value("harp_decisions_total", resource="time", outcome="changed", reason="model"),
        "mem": value("harp_decisions_total", resource="mem", outcome="kept", reason="cold_start"),
        "cpus": value("harp_decisions_total", resource="cpus", outcome="kept", reason="policy"),
        "lowered": value("harp_limits_lowered_total", resource="time"),
        "core_h": value("harp_core_hours_taken_off_total"),
        "gb_h": value("harp_gb_hours_taken_off_total"),
    }
    record.decision(job(time_s=4 * 3600, cpus_per_task=4, mem_mb=8192), d)
    assert value("harp_decisions_total", resource="time", outcome="changed", reason="model") == before["changed"] + 1
    assert value("harp_decisions_total", resource="mem", outcome="kept", reason="cold_start") == before["mem"] + 1
    assert value("harp_decisions_total", resource="cpus", outcome="kept", reason="policy") == before["cpus"] + 1
    assert value("harp_limits_lowered_total", resource="time") == before["lowered"] + 1
    # 4 cores x (4 h - 1 h) = 12 core-hours; 8 GiB x 3 h = 24 GB-hours
    assert value("harp_core_hours_taken_off_total") == pytest.approx(before["core_h"] + 12)
    assert value("harp_gb_hours_taken_off_total") == pytest.approx(before["gb_h"] + 24)


def test_fewer_cores_and_less_memory_take_off_their_share():
    d = Decision(
        changes=[
            Change(option="cpus-per-task", value="2", old="8"),
            Change(option="mem-per-cpu", value="1G", old="2G"),
        ],
        explain={"mem": {"reason": "history", "rule": "history"}, "cores": {"reason": "cores from its own runs"}},
    )
    core_h, gb_h = value("harp_core_hours_taken_off_total"), value("harp_gb_hours_taken_off_total")
    mem_lowered = value("harp_limits_lowered_total", resource="mem")
    cpus_changed = value("harp_decisions_total", resource="cpus", outcome="changed", reason="rule")
    record.decision(job(time_s=3600, cpus_per_task=8, mem_per_cpu_mb=2048), d)
    assert value("harp_core_hours_taken_off_total") == pytest.approx(core_h + 6)  # (8 - 2) cores x 1 h
    assert value("harp_gb_hours_taken_off_total") == pytest.approx(gb_h + 14)  # 16 GiB -> 2 GiB for 1 h
    assert value("harp_limits_lowered_total", resource="mem") == mem_lowered + 1
    assert value("harp_decisions_total", resource="cpus", outcome="changed", reason="rule") == cpus_changed + 1


def test_a_raise_takes_nothing_off_and_lowers_nothing():
    d = Decision(changes=[Change(option="mem", value="4G", old="2G")], explain={})
    gb_h, lowered = value("harp_gb_hours_taken_off_total"), value("harp_limits_lowered_total", resource="mem")
    record.decision(job(time_s=3600, mem_mb=2048), d)
    assert value("harp_gb_hours_taken_off_total") == gb_h
    assert value("harp_limits_lowered_total", resource="mem") == lowered


@pytest.mark.parametrize(
    ("reason", "cls"),
    [
        ("no trained model yet: request kept", "no_model"),
        ("cold start: 3 of 5 runs", "cold_start"),
        ("rounded bound reaches the request: kept", "near_request"),
        ("bound is 95% of the request: kept", "near_request"),
        ("no time request to size", "no_request"),
        ("a run of this program failed after harp lowered its memory: its request stands from now on", "restored"),
        ("7 of your last 12 jobs harp cut outgrew its limit (over the per-user budget of 30%)", "user_budget"),
        ("has a --deadline: under soft limits an extension could cross it, so its time is kept", "options"),
        ("time kept: under hard limits ... (predict.hard_cut_gain = 0; docs/metrics.md, 'Queue')", "policy"),
        ("prediction failed: boom", "error"),
        ("something no rule foresaw for job 123 of alice", "other"),
    ],
)
def test_kept_reasons_fall_into_their_class(reason, cls):
    assert record.reason_class(reason) == cls
    assert cls in r.DECISION_REASONS


def test_every_refusal_logged_at_the_doors_is_counted_by_its_reason():
    refusals = RefusalLog(logging.getLogger("test"), interval_s=3600, burst=1)
    kinds = {
        "busy": "busy",
        "unauthenticated limit": "quota",
        "waiting limit": "quota",
        "quota": "quota",
        "no request in time": "no_credential",
        "credential refused": "bad_credential",
        "request too large": "too_large",
        "a kind added later": "other",
    }
    for kind, reason in kinds.items():
        before = value("harp_refusals_total", reason=reason)
        refusals.refused(kind, "10.0.0.9:4242", "why")  # past the burst: summed in the log, counted here all the same
        assert value("harp_refusals_total", reason=reason) == before + 1, kind


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        ("job 12 is not yours; register only jobs you submitted", "not_owner"),
        ("job 12: the decision token was not issued to the job's owner; not registered", "not_owner"),
        ("job 12 has reported 1000 times; report less often", "quota"),
        ("job 12 was submitted before harpd's decision; not registered", "bad_request"),
    ],
)
def test_refused_requests_are_counted_by_reason(answer, reason):
    before = value("harp_refusals_total", reason=reason)
    record.request_refused(answer)
    assert value("harp_refusals_total", reason=reason) == before + 1


def test_extensions_recoveries_and_polls():
    made = value("harp_extensions_total", outcome="made", reason="near_limit")
    record.extension("made")
    assert value("harp_extensions_total", outcome="made", reason="near_limit") == made + 1
    refused = value("harp_extensions_total", outcome="refused", reason="slurm_refused")
    record.extension("refused", "slurm_refused")
    assert value("harp_extensions_total", outcome="refused", reason="slurm_refused") == refused + 1
    for outcome in r.RECOVERY_OUTCOMES:
        before = value("harp_recoveries_total", outcome=outcome)
        record.recovery(outcome)
        assert value("harp_recoveries_total", outcome=outcome) == before + 1
    ok = value("harp_polls_total", result="ok")
    record.poll(ok=True)
    assert value("harp_polls_total", result="ok") == ok + 1


def test_the_watch_tick_is_timed_and_its_lead_shown():
    count = value("harp_watch_tick_seconds_count")

    record.watch_tick(0.25)
    assert value("harp_watch_tick_seconds_count") == count + 1
    record.watch_timing(120.0, 30.0)
    assert value("harp_watch_lead_seconds") == 120.0
    assert value("harp_watch_interval_seconds") == 30.0


def test_a_metric_that_fails_never_fails_its_caller():
    # a change whose value cannot be parsed: the counts it could make are skipped, nothing is raised
    record.decision(job(time_s=3600), Decision(changes=[Change(option="time", value="soon", old="1:00:00")]))


#: what a scrape must never show: a job id, user names, paths (all handed to the call sites below)
SECRETS = ("9876543", "alice_secret", "/home/alice_secret", "/scratch/projX", "bob_hidden", "10.0.0.99")


def test_the_exposition_never_shows_job_ids_user_names_or_paths():
    d = Decision(
        changes=[Change(option="time", value="00:10:00", old="01:00:00", reason="for alice_secret job 9876543")],
        explain={
            "time": {"model": "gbm", "reason": "alice_secret /home/alice_secret/run.sh"},
            "mem": {"reason": "kept for job 9876543 in /scratch/projX"},
            "reason": "bob_hidden",
        },
    )
    rq = JobRequest(
        job_name="alice_secret-9876543",
        account="bob_hidden",
        cwd="/home/alice_secret",
        script_name="/scratch/projX/run.sh",
        commands=["/home/alice_secret/bin/sim --out /scratch/projX"],
        request=Resources(time_s=3600, mem_mb=1024),
    )
    record.decision(rq, d)
    record.decision_refused("predictor failed for alice_secret on job 9876543")
    record.refused("refused 10.0.0.99 for alice_secret's job 9876543 in /home/alice_secret")
    record.request_refused("job 9876543 is not yours (alice_secret); /home/alice_secret")
    record.extension("made for 9876543", "alice_secret")
    record.recovery("/scratch/projX")
    RefusalLog(logging.getLogger("test")).refused("/home/alice_secret", "10.0.0.99:1", "job 9876543 of bob_hidden")
    text = generate_latest(REGISTRY).decode()
    for secret in SECRETS:
        assert secret not in text, secret
    # and every label value of harp's own series is one of the fixed sets
    allowed = {
        "resource": set(r.RESOURCES),
        "outcome": {r.OTHER, *r.DECISION_OUTCOMES, *r.EXTENSION_OUTCOMES, *r.RECOVERY_OUTCOMES},
        "reason": set(r.DECISION_REASONS) | set(r.EXTENSION_REASONS) | set(r.REFUSAL_REASONS),
        "result": set(r.POLL_RESULTS),
        "le": None,  # histogram buckets: numbers
    }
    for line in text.splitlines():
        if not line.startswith("harp_") or "{" not in line:
            continue
        for key, val in re.findall(r'(\w+)="([^"]*)"', line):
            assert key in allowed, line
            if allowed[key] is not None:
                assert val in allowed[key], line
