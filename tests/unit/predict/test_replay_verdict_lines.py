"""Each verdict line of `harp replay` says what its figures say (issue: verdicts true in words).

Every case here is one a replay printed wrongly: a headline that called harp
better under a queue it made worse, kills of the users' own requests charged
to harp, a difference within its noise that leaned one way, shares of a gap
far outside 0-100%, a raw dict in the header, two harp rows with no word of
which is which, two extension counts that disagree without a reason, and a
soft replay of a trace with no requests that spoke of ``keep_templates``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from harpd.cli.main import main
from harpd.cli.replay_cmd import gap_words, skipped_words
from harpd.cli.replay_report import ReplayReport
from harpd.cli.replay_verdict import queue_lines, verdict, with_queue
from harpd.cli.replay_workflow import render
from harpd.evaluate.schedule_simulation import gap_sizes, own_kills
from harpd.replay.metric import Jobs, ModelMetrics, evaluate
from harpd.simulate import Summary
from harpd.simulate.shake import paired
from tests.unit.predict.replay_helpers import metric_row, replay_report


def _row(model: str, over: float, score: float, **kw) -> ModelMetrics:
    return metric_row(model, over, score, **{"killed_jobs": 10, "harp_kills": 0, **kw})


def _report(*rows: ModelMetrics, limits: str = "hard") -> ReplayReport:
    return replay_report(*rows, limits=limits)


def _cmp(rel: float, se: float, way: str, copies: int = 5, up: int = 0, down: int = 0) -> dict:
    return {"rel_diff": rel, "se": se, "verdict": way, "copies": copies, "higher_copies": up, "lower_copies": down}


def _queue(row: str, wait: dict, bsld: dict, kills: int = 0, users_kills: int = 0, harp_kills: int | None = 0) -> dict:
    harp = {"policy": row, "kills": kills, "extensions": 7}
    if harp_kills is not None:
        harp["harp_kills"] = harp_kills
    return {
        "replicas": 5,
        "procs": 64,
        "notes": [],
        "policies": [{"policy": "users", "kills": users_kills, "extensions": 0}, harp],
        "vs_users": {row: {"mean_wait_s": wait, "mean_bounded_slowdown": bsld}},
    }


def test_a_queue_harp_made_worse_decides_the_headline_whatever_the_reservations_say():
    v = verdict(_report(_row("request", 7200.0, 0.9), _row("harp", 3600.0, 0.5)))
    assert v.better == "harp"  # on the reservations alone
    q = _queue("harp-soft", _cmp(1.757, 0.167, "higher", up=5), _cmp(0.525, 0.089, "higher", up=5))
    got = with_queue(v, q, "soft")
    assert got.better == "users"
    assert got.text[0].startswith("verdict: the users' own requests would have been better than harp")
    assert "raised the queue's mean wait and mean bounded slowdown" in got.text[0]
    assert not any("harp would have been better" in line for line in got.text)
    assert got.text[1].startswith("queue verdict:") and "RAISED the mean wait by 175.7%" in got.text[1]


def test_harp_is_called_better_only_when_the_queue_is_no_worse():
    v = verdict(_report(_row("request", 7200.0, 0.9), _row("harp", 3600.0, 0.5)))
    same = _cmp(0.01, 0.02, "no clear difference", up=3, down=2)
    got = with_queue(v, _queue("harp-soft", same, same), "soft")
    assert got.better == "harp" and got.text[0].endswith("the queue is no worse.")
    lower = _cmp(-0.2, 0.02, "lower", down=5)
    assert "it lowered the queue's mean wait" in with_queue(v, _queue("harp-soft", lower, same), "soft").text[0]
    worse = verdict(_report(_row("request", 3600.0, 0.5), _row("harp", 7200.0, 0.9)))
    mixed = with_queue(worse, _queue("harp-soft", lower, same), "soft")
    assert mixed.better == "mixed" and mixed.text[0].startswith("verdict: mixed: harp lowered the queue's mean wait")


def test_the_users_own_kills_are_not_harps_under_hard_limits():
    # harp changed no job: the 10 jobs killed are killed at their own request, as in the trace
    v = verdict(_report(_row("request", 7200.0, 0.9, killed_jobs=10), _row("harp", 7200.0, 0.9, killed_jobs=10)))
    killed = next(line for line in v.text if line.strip().startswith("killed:"))
    assert "harp killed no job below its request" in killed
    assert "the users' own requests stop 10 jobs (10.0%) that ran past them (as in the trace: not run again)" in killed
    assert "run again, burning" not in killed
    cut = verdict(
        _report(_row("request", 7200.0, 0.9), _row("harp", 3600.0, 0.5, harp_kills=3, harp_killed=7200.0, lost=1))
    )
    line = next(x for x in cut.text if x.strip().startswith("killed:"))
    assert "harp killed 3 jobs (3.0%) below their request; each ran again with more, burning 2 core-hours" in line
    assert "1 ran out of attempts" in line


def test_the_metric_tells_harps_kills_from_the_users_own():
    need = np.array([100.0, 50.0, 80.0, 20.0])
    req = np.array([100.0, 100.0, 100.0, 100.0])
    cens = np.array([True, False, False, False])  # job 0 ran to its request: the user's own kill
    w = np.ones(4)
    kept = evaluate("harp", np.full(4, np.nan), Jobs(need, req, cens, w), baseline=None)
    assert kept.killed_jobs == 1 and kept.harp_kills == 0 and kept.harp_killed == 0.0
    cut = evaluate("harp", np.array([np.nan, 40.0, 90.0, 30.0]), Jobs(need, req, cens, w))
    assert cut.harp_kills == 1  # job 1: cut to 40 below its 50
    assert cut.killed_jobs == 2 and cut.harp_killed == 40.0


def test_a_hard_row_that_cut_nothing_says_so_even_when_the_users_requests_kill():
    q = _queue("harp-hard", _cmp(0.0, 0.0, "no clear difference"), _cmp(0.0, 0.0, "no clear difference"), 23434, 23434)
    lines = queue_lines(q, "hard")
    assert lines[1].startswith("  harp killed no job: under hard limits it cut only where")
    assert "23,434 runs reached the users' own requests in the simulated queue" in lines[1]
    assert "each loses its partial run" not in lines[1]
    users = [Summary("users", 8, 10, 0, 1, 1, 1, 1, 1, 1, kills=5, extensions=0, abandoned=5,
                     delayed_by_extension=0, delayed_by_kill=0, delayed_starts=0)] * 2  # fmt: skip
    harp = [dataclasses.replace(users[0], policy="harp-hard", kills=k) for k in (8, 6)]
    assert own_kills(users, users) == 0 and own_kills(users, harp) == 2


def test_a_difference_within_its_noise_says_which_way_the_copies_lean():
    line = queue_lines(
        _queue("harp-soft", _cmp(0.095, 0.07, "no clear difference", up=4, down=1), _cmp(0, 0, "x")), "soft"
    )
    assert (
        "did not clearly change the mean wait (+9.5% (±7.0%), within two standard errors; higher in 4 of 5" in line[0]
    )
    base = [Summary("u", 8, 10, 0, w, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0) for w in (100.0, 100.0, 100.0, 100.0, 100.0)]
    other = [dataclasses.replace(s, mean_wait_s=w) for s, w in zip(base, (130.0, 90.0, 120.0, 110.0, 101.0))]
    got = paired(base, other)["mean_wait_s"]
    assert got["copies"] == 5 and got["higher_copies"] == 4 and got["lower_copies"] == 1


def test_gap_shares_are_shown_only_where_the_gap_is_larger_than_its_noise():
    noisy = gap_words(5.46, {"gap": 30.0, "se": 40.0}, "mean wait")
    assert "within its noise, no share of it shown" in noisy and "546%" not in noisy
    assert "better than exact runtimes (546% of the users→exact gap)" in gap_words(
        5.46, {"gap": 900.0, "se": 10.0}, "w"
    )
    assert "worse than the users' requests (-123%" in gap_words(-1.23, {"gap": 900.0, "se": 10.0}, "w")
    assert gap_words(0.4, {"gap": 900.0, "se": 10.0}, "w") == "w: closes 40% of the users→exact gap"
    assert "no gap to close" in gap_words(None, {"gap": -5.0, "se": 1.0}, "w")
    s = [Summary("u", 8, 10, 0, w, 1, b, 1, 1, 1, 0, 0, 0, 0, 0, 0) for w, b in ((100.0, 3.0), (120.0, 3.0))]
    x = [dataclasses.replace(r, mean_wait_s=r.mean_wait_s - 50) for r in s]
    sizes = gap_sizes(s, x)
    assert sizes["mean_wait_s"] == {"gap": 50.0, "se": 0.0} and sizes["mean_bounded_slowdown"]["gap"] == 0.0


def test_the_header_names_skipped_jobs_in_words_not_a_dict():
    assert skipped_words({"no usage": 10744}) == "10,744 jobs with no usage"
    assert skipped_words({"not finished": 3, "no request": 2}) == "3 jobs not finished, 2 with no request"


def test_the_chronological_memory_table_says_which_harp_row_is_which():
    rows = {
        "harp": {"used_gbh": 10.0, "wastage_gbh": 2.0, "failures": 415},
        "tovar": {"wastage_gbh": 3.0, "failures": 9},
    }
    text = render({"rows": rows, "protocol": "chronological", "seed": None, "tasks": 5, "types": 2})
    assert "the two harp rows are different rules, not one counted twice" in text
    assert "counted twice" not in render({"rows": rows, "protocol": "sizey", "seed": 1, "tasks": 5, "types": 2})


def test_extension_counts_say_what_each_counts():
    line = queue_lines(_queue("harp-soft", _cmp(0, 0, "x"), _cmp(0, 0, "x")), "soft")[1]
    assert "7 extensions (each one counted; the replay's 'extended' counts jobs, on the recorded timeline)" in line


def test_the_soft_queue_verdict_says_which_loop_decided_harp_soft():
    q = _queue("harp-soft", _cmp(0, 0, "x"), _cmp(0, 0, "x"))
    closed = queue_lines({**q, "soft_loop": "closed"}, "soft")[2]
    ruled = queue_lines({**q, "soft_loop": "closed", "queue_rule": True}, "soft")[2]
    opened = queue_lines({**q, "soft_loop": "open"}, "soft")[2]
    assert "closed loop" in closed and "at its submission in the simulated queue" in closed
    assert "reads no queue" in closed and "open loop's figures" in closed
    assert "with the queue rule (predict.queue_rule" in ruled and "planned with the request" in ruled
    assert "without the queue rule (--no-queue-rule" in closed
    assert "open loop (--open-loop)" in opened and "recorded timeline" in opened
    assert "no record" in queue_lines(q, "soft")[2]
    # under hard limits the soft loop is not the row judged: no line for it
    assert not any(
        "loop" in line for line in queue_lines(_queue("harp-hard", _cmp(0, 0, "x"), _cmp(0, 0, "x")), "hard")
    )


def test_a_soft_replay_of_a_trace_with_no_requests_says_so_in_words(tmp_path: Path, capsys):
    trace = tmp_path / "noreq.swf"
    # SWF: id submit wait run procs cpu mem reqprocs REQTIME reqmem status uid gid app queue part prev think
    lines = [f"{i} {i * 100} 0 {50 + i} 1 -1 -1 1 -1 -1 1 {1 + i % 3} 1 1 1 1 -1 -1" for i in range(1, 60)]
    trace.write_text("\n".join(lines) + "\n")
    rc = main(["replay", str(trace), "--limits", "soft", "--quiet"])
    err = capsys.readouterr().err
    assert rc != 0 and "Traceback" not in err
    assert "soft limits need the users' requested times and this trace has none" in err
    assert "keep_templates" not in err


def test_a_hard_time_replay_where_every_model_kept_every_request_says_why() -> None:
    from harpd.cli.replay_cmd import render_table

    kept = _report(_row("request", 7200.0, 0.9, changed=0.0), _row("tsafrir", 7200.0, 0.9, changed=0.0))
    assert "note: every model kept every time request" in render_table(kept)
    assert "predict.hard_cut_gain" in render_table(kept)
    cut = _report(_row("request", 7200.0, 0.9, changed=0.0), _row("tsafrir", 3600.0, 0.5, changed=0.3))
    assert "every model kept" not in render_table(cut)
    soft = _report(_row("request", 7200.0, 0.9, changed=0.0), _row("harp", 7200.0, 0.9, changed=0.0), limits="soft")
    assert "every model kept" not in render_table(soft)
