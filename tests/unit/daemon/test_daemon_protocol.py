"""Socket messages: what is accepted, and the one-line error for what is not."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from harpd import protocol as p


def ok(obj) -> object:
    return p.parse_request(json.dumps(obj).encode())


def err(data) -> str:
    raw = data if isinstance(data, bytes) else json.dumps(data).encode()
    with pytest.raises(p.ProtocolError) as ei:
        p.parse_request(raw)
    msg = str(ei.value)
    assert "\n" not in msg
    return msg


FULL_JOB = {
    "partition": "gpu",
    "account": "proj",
    "job_name": "train",
    "script_name": "run.sh",
    "signature": "python train.py",
    "cwd": "/home/a",
    "array_size": 10,
    "request": {"time_s": 3600, "mem_mb": 4096, "cpus_per_task": 4, "gres": "gpu:a100:1"},
    "harp_lines": ["#HARP dnn params=7e9"],
}


def test_every_op_parses_to_its_model():
    assert isinstance(ok({"v": 1, "op": "predict", "job": FULL_JOB}), p.PredictRequest)
    reg = ok(
        {
            "v": 1,
            "op": "register",
            "job_id": "123_4",
            "job": FULL_JOB,
            "original": {"time_s": 60},
            "submitted": {"time_s": 120},
            "decision": None,
        }
    )
    assert isinstance(reg, p.RegisterRequest) and reg.submitted.time_s == 120
    assert isinstance(ok({"op": "status", "job_id": "77+1"}), p.StatusRequest)
    assert isinstance(ok({"op": "health"}), p.HealthRequest)
    assert isinstance(ok({"op": "retrain"}), p.RetrainRequest)
    assert isinstance(ok({"op": "reload"}), p.ReloadRequest)
    assert ok({"op": "import", "path": "/x.swf"}).path == "/x.swf"


def test_predict_keeps_every_job_field():
    req = ok({"v": 1, "op": "predict", "job": FULL_JOB})
    assert req.job.model_dump(exclude_none=True)["request"] == FULL_JOB["request"]
    assert req.job.harp_lines == FULL_JOB["harp_lines"]


def test_register_with_a_full_decision():
    decision = {
        "changes": [{"option": "time", "value": "0-01:30:00", "old": "2-00:00:00", "reason": "p95 of 37 runs"}],
        "limits": {"partition": "cpu", "max_time_s": 172800, "max_mem_mb": None, "max_cpus": 64},
        "model": "gbm-q",
        "explain": {"n": 37},
    }
    req = ok({"op": "register", "job_id": "9", "job": {}, "original": {}, "submitted": {}, "decision": decision})
    assert req.decision.changes[0].value == "0-01:30:00"
    assert req.decision.limits.max_cpus == 64


@pytest.mark.parametrize(
    "data, needle",
    [
        (b"not json\n", "not valid JSON"),
        (b"\xff\xfe\n", "not UTF-8"),
        (b"   \n", "empty request"),
        (b"[1, 2]\n", "must be a JSON object"),
        ({"v": 1}, "missing 'op'"),
        ({"op": "rm -rf"}, "unknown op 'rm -rf'"),
        ({"v": 2, "op": "health"}, "unsupported protocol version 2"),
        ({"op": "predict"}, "job"),
        ({"op": "predict", "job": {"request": {"time_s": -5}}}, "job.request.time_s"),
        ({"op": "predict", "job": {"request": {"mem_mb": "lots"}}}, "job.request.mem_mb"),
        ({"op": "predict", "job": {"typo_field": 1}}, "job.typo_field"),
        ({"op": "health", "uid": 0}, "uid"),  # identity can never come from the message
        ({"op": "status", "job_id": "12; rm"}, "is not a Slurm job id"),
        ({"op": "status", "job_id": 12}, "job_id"),
        ({"op": "register", "job_id": "1", "job": {}, "original": {}}, "submitted"),
        (
            {"op": "predict", "job": {"request": {}}, "decision": {"changes": [{"option": "rm", "value": "x"}]}},
            "decision",
        ),
        ({"op": "import", "path": ""}, "path"),
    ],
)
def test_bad_requests_get_one_line_naming_the_problem(data, needle):
    assert needle in err(data)


def test_change_option_is_restricted_to_sbatch_targets():
    with pytest.raises(ValidationError):
        p.Change(option="account", value="x")
    assert p.Change(option="mem-per-cpu", value="2G").option == "mem-per-cpu"


def test_deeply_nested_json_is_an_error_not_a_crash():
    msg = err(b"[" * 100000 + b"]" * 100000 + b"\n")
    assert "JSON" in msg


def test_answers_round_trip_and_end_with_newline():
    line = p.encode(p.PredictAnswer(decision=p.Decision(limits=p.Limits(partition="cpu"))))
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert p.parse_answer(line)["decision"]["limits"]["partition"] == "cpu"
    e = p.encode(p.error("bad\nthing   here"))
    assert json.loads(e) == {"ok": False, "error": "bad thing here"}


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_arbitrary_bytes_never_raise_anything_but_protocol_error(data):
    try:
        p.parse_request(data)
    except p.ProtocolError as exc:
        assert "\n" not in str(exc)


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["v", "op", "job", "job_id", "path", "x"]),
        st.one_of(
            st.none(),
            st.integers(),
            st.text(max_size=20),
            st.sampled_from(p.OPS),
            st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
        ),
    )
)
def test_arbitrary_objects_never_raise_anything_but_protocol_error(obj):
    try:
        p.parse_request(json.dumps(obj))
    except p.ProtocolError as exc:
        assert "\n" not in str(exc)


# ------------------------------------------- the decision's typed why, both ways of a version change


def test_a_decision_takes_its_typed_why_from_explain() -> None:
    """A decider that fills only ``explain`` still answers with the typed fields harp-submit reads."""
    d = p.Decision(explain={"reason": "no model: request kept", "time": {"reason": "cold start"}, "cores": "odd"})
    assert d.reason == "no model: request kept"
    assert (d.kept.time, d.kept.mem, d.kept.cores) == ("cold start", None, None)
    wire = json.loads(d.model_dump_json())
    # an older harp-submit reads explain's keys: still there, as they were
    assert wire["explain"]["time"] == {"reason": "cold start"} and wire["explain"]["reason"] == "no model: request kept"
    assert wire["kept"] == {"time": "cold start", "mem": None, "cores": None}


def test_typed_why_given_is_kept_over_explain() -> None:
    d = p.Decision(reason="typed", kept=p.Kept(mem="typed mem"), explain={"reason": "loose", "mem": {"reason": "x"}})
    assert d.reason == "typed" and d.kept.mem == "typed mem"


def test_registrations_from_older_and_newer_clients_are_accepted() -> None:
    """harp-submit echoes the decision it got: an older harpd's (no typed fields) or this one's."""
    job = {"job_name": "x", "request": {"time_s": 600}}
    old = {"changes": [{"option": "time", "value": "10", "reason": "r"}], "limits": {}, "model": "m", "explain": {}}
    new = json.loads(p.Decision.model_validate({**old, "explain": {"time": {"reason": "r"}}}).model_dump_json())
    assert new["kept"]["time"] == "r"
    for decision in (old, new):
        reg = ok({"op": "register", "job_id": "7", "job": job, "original": {}, "submitted": {}, "decision": decision})
        assert isinstance(reg, p.RegisterRequest) and reg.decision is not None
        assert reg.decision.changes[0].value == "10"


def test_an_unknown_typed_why_is_refused_like_any_unknown_field() -> None:
    assert "kept" in err(
        {
            "op": "register",
            "job_id": "7",
            "job": {},
            "original": {},
            "submitted": {},
            "decision": {"kept": {"walltime": "x"}},
        }
    )
