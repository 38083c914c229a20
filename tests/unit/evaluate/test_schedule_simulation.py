"""The schedule simulation's adapter (harpd.evaluate.schedule_simulation) on a hand-made trace, and
`harp replay --schedule`.

The trace, on a machine of P=2 processors (submit, processors, runtime, request):

* A: (0, 1, 100, 1000)
* B: (0, 2, 10, 10): needs the whole machine, blocked behind A
* C: (1, 1, 50, 2000)

users: A starts at 0; B is blocked, its reservation is A's planned end 1000
(no extra processor); C at 1 would run to 1+2000 > 1000: no backfill.  A ends
at 100, B runs 100-110, C 110-160.  Waits 0, 100, 109.
exact: C's limit is 50, 1+50 <= A's planned end 100: C backfills at 1 and ends
at 51; B runs 100-110.  Waits 0, 100, 0.
harp-hard, C given 30: C backfills at 1 (31 <= 1000), is killed at 31 and
resubmitted with the escalation's next limit, 60; 31+60 <= 1000: it starts
again at 31 and completes at 81.  B runs 100-110.  Waits 0, 100, 30.
harp-soft, A given 60 and C 50: B's reservation is 60; C backfills at 1
(1+50 <= 60) and ends at 51.  At 60 A reaches its limit and is extended to
120 (double, under its request): B's promised start 60 is broken, it starts
when A ends at 100.  Waits 0, 100, 0; one start delayed by an extension.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from harpd.cli.main import main as harp_main
from harpd.evaluate.schedule_simulation import QueueError, ScheduleOptions, gap_closed, policies, schedule
from harpd.replay.dataset import prepare
from harpd.report.queue_figures import load, path_beside
from tests.unit.predict.replay_helpers import rec

NAN = math.nan


def _bsld(wait: float, run: float) -> float:
    return max(1.0, (wait + run) / max(run, 10.0))


def _expected(waits, runs):
    return np.mean(waits), np.mean([_bsld(w, r) for w, r in zip(waits, runs)])


@pytest.fixture(scope="module")
def prep():
    return prepare([rec(0, 0, 100, 1000, cpus=1), rec(1, 0, 10, 10, cpus=2), rec(2, 1, 50, 2000, cpus=1)], "time")


def test_four_policies_by_hand(prep):
    q = schedule(
        prep,
        2,
        hard=np.array([NAN, NAN, 30.0]),
        soft=np.array([60.0, NAN, 50.0]),
        options=ScheduleOptions(closed_loop=False),
    )
    assert q["soft_loop"] == "open"
    rows = {p["policy"]: p for p in q["policies"]}
    assert list(rows) == ["users", "harp-hard", "harp-soft", "exact"]
    want = {
        "users": ([0, 100, 109], [100, 10, 50]),
        "exact": ([0, 100, 0], [100, 10, 50]),
        "harp-hard": ([0, 100, 30], [100, 10, 50]),
        "harp-soft": ([0, 100, 0], [100, 10, 50]),
    }
    for name, (waits, runs) in want.items():
        w, b = _expected(waits, runs)
        assert rows[name]["mean_wait_s"] == pytest.approx(w), name
        assert rows[name]["mean_bounded_slowdown"] == pytest.approx(b), name
    # kills and extensions, and the starts they delayed
    assert (rows["harp-hard"]["kills"], rows["harp-hard"]["delayed_by_kill"]) == (1, 1)
    assert (rows["harp-soft"]["extensions"], rows["harp-soft"]["delayed_by_extension"]) == (1, 1)
    assert rows["users"]["delayed_starts"] == rows["exact"]["delayed_starts"] == 0
    # utilization: held processor-seconds (the killed run too) over P x makespan
    assert rows["users"]["utilization"] == pytest.approx((100 + 2 * 10 + 50) / (2 * 160))
    assert rows["harp-hard"]["utilization"] == pytest.approx((100 + 2 * 10 + 30 + 50) / (2 * 110))
    # the share of the users -> exact gap each harp row closes
    g = q["gap_closed"]
    uw, ub = _expected(*want["users"])
    xw, xb = _expected(*want["exact"])
    hw, hb = _expected(*want["harp-hard"])
    assert g["harp-hard"]["mean_wait_s"] == pytest.approx((uw - hw) / (uw - xw))
    assert g["harp-hard"]["mean_bounded_slowdown"] == pytest.approx((ub - hb) / (ub - xb))
    assert g["harp-soft"]["mean_wait_s"] == pytest.approx(1.0)
    assert q["procs"] == 2 and q["jobs"] == 3 and q["notes"] == []


def test_closed_loop_soft_plans_a_shallow_cut_with_its_request_behind_a_deep_queue(prep):
    # Closed loop: each soft limit is decided at the submission from the simulated queue.
    # A (0, 1 proc, runs 100, asks 1000) gets 60 and nothing waits: it keeps it.  B (0, 2 procs,
    # runs 10, asks 100) waits behind A, reservation 60.  C (1, 1 proc, runs 30, asks 100) is cut
    # to 50, half its request (shallow); it sees B's 2 x 100 processor-seconds on 2 processors:
    # the machine is busy 100 s, as long as C's request, so the rule plans C with 100.
    # 1 + 100 > 60: C no longer backfills.  At 60 A is extended (to 120), it ends at 100,
    # B runs 100-110, C 110-140.  Waits 0, 100, 109.  Without the rule C backfills at 1.
    shallow = prepare([rec(0, 0, 100, 1000, cpus=1), rec(1, 0, 10, 100, cpus=2), rec(2, 1, 30, 100, cpus=1)], "time")
    q = schedule(shallow, 2, hard=None, soft=np.array([60.0, NAN, 50.0]), options=ScheduleOptions(queue_rule=True))
    assert q["soft_loop"] == "closed" and q["queue_rule"] is True
    soft = {p["policy"]: p for p in q["policies"]}["harp-soft"]
    w, b = _expected([0, 100, 109], [100, 10, 30])
    assert (soft["mean_wait_s"], soft["mean_bounded_slowdown"]) == (pytest.approx(w), pytest.approx(b))
    # a deep cut (20 of 100) stands under the same queue: C backfills at 1 (waits 0, 100, 0)
    q = schedule(shallow, 2, hard=None, soft=np.array([60.0, NAN, 20.0]), options=ScheduleOptions(queue_rule=True))
    assert {p["policy"]: p for p in q["policies"]}["harp-soft"]["mean_wait_s"] == pytest.approx(100 / 3)
    # without the rule the closed loop asks for today's limits: the open loop's schedule (waits 0, 100, 0)
    q = schedule(shallow, 2, hard=None, soft=np.array([60.0, NAN, 50.0]))
    assert (q["soft_loop"], q["queue_rule"]) == ("closed", False)
    soft = {p["policy"]: p for p in q["policies"]}["harp-soft"]
    assert soft["mean_wait_s"] == pytest.approx(100 / 3)
    # without a soft row there is no loop to tell
    assert schedule(prep, 2, hard=None, soft=None)["soft_loop"] is None


def test_absent_rows_and_a_gap_that_does_not_exist(prep):
    q = schedule(prep, 2, hard=None, soft=None)
    assert [p["policy"] for p in q["policies"]] == ["users", "exact"] and q["gap_closed"] == {}
    # on a machine as wide as the trace nobody waits: exact cannot beat the users
    q = schedule(prep, 4, hard=np.array([NAN, NAN, 30.0]), soft=None)
    assert q["gap_closed"]["harp-hard"]["mean_wait_s"] is None
    assert any("do not beat" in n for n in q["notes"])
    # B is wider than one processor: left out of every row, and said so
    q = schedule(prep, 1, hard=None, soft=None)
    assert q["jobs"] == 3 and all(p["rejected"] == 1 for p in q["policies"])
    assert any("wider than 1" in n for n in q["notes"])


@pytest.mark.parametrize(
    ("option", "words"),
    [
        ({"replicas": 0}, "--replicas 0: at least one copy"),
        ({"shake_s": -5.0}, "--shake -5: a shaking amplitude is 0 seconds or more"),
        ({"compress": 0.0}, "--compress 0: a factor above 0 and at most 1"),
        ({"compress": 1.5}, "--compress 1.5: a factor above 0 and at most 1"),
    ],
)
def test_options_the_simulation_cannot_use_are_one_line_errors(option, words):
    with pytest.raises(QueueError, match=words) as err:
        ScheduleOptions(**option)
    assert "\n" not in str(err.value)


def test_a_machine_without_processors_is_refused(prep):
    with pytest.raises(QueueError, match="--procs 0: the machine needs at least one processor"):
        schedule(prep, 0, hard=None, soft=None)


def test_hard_escalation_gives_up_to_the_request(prep):
    # C given 1 s: 1 -> 2 -> 4 (attempt 3 of 3), then the user resubmits with the request
    pols = {p.name: p for p in policies(prep, np.array([NAN, NAN, 1.0]), None, max_attempts=3)}
    hook = pols["harp-hard"].on_limit
    assert [hook(2, 1.0, 0), hook(2, 2.0, 1), hook(2, 4.0, 2), hook(2, 2000.0, 3)] == [2.0, 4.0, 2000.0, None]
    assert pols["users"].on_limit is None and pols["exact"].limit.tolist() == [100, 10, 50]


def test_gap_closed_needs_both_ends():
    assert gap_closed({"users": {"mean_wait_s": 1, "mean_bounded_slowdown": 1}}) == {}


def test_no_requests_is_an_error():
    p = prepare([rec(0, 0, 100, 1000)], "time")
    p.request[:] = NAN
    with pytest.raises(QueueError, match="requested time"):
        schedule(p, 2, None, None)


# -- the command -----------------------------------------------------------------------------


def _swf(path, header: str = "; MaxProcs: 4"):
    rows = [(i, i * 50, 40 + (i * 37) % 400, 1 + i % 3, 600) for i in range(60)]
    lines = [header] + [f"{i} {t} 0 {r} {p} -1 -1 {p} {q} -1 1 {1 + i % 4} 1 -1 -1 1 -1 -1" for i, t, r, p, q in rows]
    path.write_text("\n".join(lines) + "\n")


def _config(tmp_path, monkeypatch):
    cfg = tmp_path / "harp.toml"
    cfg.write_text(f'[store]\npath = "{tmp_path / "harp.db"}"\n')
    monkeypatch.setenv("HARP_CONFIG", str(cfg))
    return tmp_path / "harp.db"


def test_cli_schedule_json_and_saved_figures(tmp_path, capsys, monkeypatch):
    db = _config(tmp_path, monkeypatch)
    f = tmp_path / "t.swf"
    _swf(f)
    assert harp_main(["replay", str(f), "--quiet", "--models", "request,harp", "--schedule", "--format", "json"]) == 0
    d = json.loads(capsys.readouterr().out)
    q = d["queue"]
    assert q["procs"] == 4 and q["jobs"] == 60
    names = [p["policy"] for p in q["policies"]]
    assert names[0] == "users" and names[-1] == "exact" and "harp-hard" in names
    for p in q["policies"]:
        for k in (
            "mean_wait_s",
            "p95_wait_s",
            "mean_bounded_slowdown",
            "utilization",
            "delayed_by_extension",
            "delayed_by_kill",
            "delayed_starts",
            "seconds",
        ):
            assert k in p, k
    saved = load(path_beside(db))
    assert saved is not None and [p["policy"] for p in saved["policies"]] == names
    # five copies by default (input shaking): standard errors and the paired comparison with the users
    assert q["replicas"] == 5 and q["shake_s"] == 60.0
    assert all(p["replicas"] == 5 and p["mean_wait_s_se"] is not None for p in q["policies"])
    assert set(q["vs_users"]) == set(names) - {"users"}
    assert q["vs_users"]["exact"]["mean_bounded_slowdown"]["verdict"] in ("lower", "higher", "no clear difference")
    # the table: --procs overrides the header
    assert harp_main(["replay", str(f), "--quiet", "--models", "request", "--schedule", "--procs", "8"]) == 0
    out = capsys.readouterr().out
    assert "queue: FCFS + EASY backfilling on 8 processors" in out and "no harp rows" in out


def test_cli_schedule_decides_with_the_queue_rule_as_the_site_s_harpd_does(tmp_path, capsys, monkeypatch):
    db = _config(tmp_path, monkeypatch)
    f = tmp_path / "t.swf"
    _swf(f)
    argv = ["replay", str(f), "--quiet", "--models", "request,harp", "--schedule", "--format", "json"]

    def rule(*more: str) -> bool:
        assert harp_main([*argv, *more]) == 0
        q = json.loads(capsys.readouterr().out)["queue"]
        assert q["soft_loop"] == ("open" if "--open-loop" in more else "closed")
        return q["queue_rule"]

    assert rule() is True  # the default, as harpd's predict.queue_rule
    assert rule("--no-queue-rule") is False
    assert rule("--open-loop") is False  # the open loop decides on the recorded timeline: no queue to read
    cfg = tmp_path / "harp.toml"
    cfg.write_text(f'[store]\npath = "{db}"\n[predict]\nqueue_rule = false\n')
    assert rule() is False  # a site that turned it off replays its harpd without it
    assert rule("--queue-rule") is True


@pytest.mark.parametrize(
    "argv,msg",
    [
        (["--schedule"], "pass --procs N"),  # a sacct export: no machine size
        (["--schedule", "--procs", "0"], "at least one processor"),
        (["--procs", "4"], "add --schedule"),
        (["--open-loop"], "--open-loop chooses how the simulated queue of --schedule"),
        (["--queue-rule"], "--queue-rule chooses how harp-soft is decided inside the simulated queue"),
        (["--no-queue-rule"], "--no-queue-rule chooses how harp-soft is decided inside the simulated queue"),
        (["--schedule", "--procs", "4", "--open-loop", "--queue-rule"], "without --open-loop"),
        (["--schedule", "--procs", "4", "--replicas", "0"], "--replicas 0: at least 1 copy"),
        (["--schedule", "--procs", "4", "--shake", "-5"], "--shake -5: give the seconds"),
        (["--schedule", "--procs", "4", "--shake", "nan"], "--shake nan: give the seconds"),
    ],
)
def test_cli_schedule_errors_are_one_line(tmp_path, capsys, monkeypatch, argv, msg):
    _config(tmp_path, monkeypatch)
    f = tmp_path / "cedar.psv"
    f.write_text(
        "JobID|User|Partition|ReqCPUS|Timelimit|Elapsed|State|Submit|Start|End\n"
        "1|u1|p|2|01:00:00|00:10:00|COMPLETED|2021-05-01T00:00:00|2021-05-01T00:00:00|"
        "2021-05-01T00:10:00\n"
    )
    assert harp_main(["replay", str(f), "--quiet", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("harp: ") and msg in err[0]


def test_cli_swf_without_header_needs_procs(tmp_path, capsys, monkeypatch):
    _config(tmp_path, monkeypatch)
    f = tmp_path / "t.swf"
    _swf(f, header="; UnixStartTime: 0")
    assert harp_main(["replay", str(f), "--quiet", "--schedule"]) == 2
    assert "MaxProcs" in capsys.readouterr().err


# -- the report's queue panel ------------------------------------------------------------------


@pytest.mark.parametrize("with_jobs", [False, True])
def test_report_queue_panel_present_only_after_a_schedule(tmp_path, monkeypatch, with_jobs):
    from harpd.config import load_settings
    from harpd.report import build
    from harpd.report.queue_figures import save
    from harpd.store import Store

    db = _config(tmp_path, monkeypatch)
    settings = load_settings(None)
    if with_jobs:
        with Store.open(db) as s:
            s.insert_jobs([rec(1, 1_700_000_000, 50, 100)])

    def page() -> str:
        with Store.open(db) as s:
            r = build.build(
                s, settings, by="user", window=build.window_of(settings, "all", None), user=None, source="test"
            )
        return build.render(r, "html")

    assert 'id="queue"' not in page()
    q = schedule(
        prepare([rec(0, 0, 100, 1000, cpus=1), rec(1, 0, 10, 10, cpus=2), rec(2, 1, 50, 2000, cpus=1)], "time"),
        2,
        hard=np.array([NAN, NAN, 30.0]),
        soft=np.array([60.0, NAN, 50.0]),
    )
    save(path_beside(db), q)
    html = page()
    assert 'id="queue"' in html
    for label in (
        "users' requests",
        "harp, hard limits",
        "harp, soft limits",
        "exact runtimes",
        "mean bounded slowdown",
    ):
        assert label in html
    path_beside(db).write_text("{not json")  # a damaged file: no panel, no failure
    assert 'id="queue"' not in page()


def test_a_machine_too_small_for_every_job(prep):
    p1 = prepare([rec(0, 0, 100, 1000, cpus=4)], "time")
    q = schedule(p1, 2, hard=np.array([NAN]), soft=None)
    assert q["policies"][0]["mean_wait_s"] is None and q["gap_closed"]["harp-hard"]["mean_wait_s"] is None
    json.dumps(q, allow_nan=False)  # savable as it is
