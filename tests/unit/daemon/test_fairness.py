"""One user cannot slow harpd for the others (#44): turns by user, a quota on what a user stores, bounded requests."""

from __future__ import annotations

import threading
import time

import pytest

from harpd import protocol as p
from harpd.daemon.fair_turns import FairTurns
from harpd.daemon.handlers import Handlers, Peer
from harpd.protocol import Decision, JobRequest, Resources
from harpd.store import QuotaExceeded, Store
from tests.helpers.wait import wait_for


@pytest.fixture
def store(tmp_path):
    s = Store.open(tmp_path / "harp.db")
    yield s
    s.close()


def test_turns_go_round_the_users_waiting() -> None:
    turns = FairTurns()
    order: list[str] = []
    first_in = threading.Event()
    go = threading.Event()

    def take(uid: int, name: str, hold: threading.Event | None = None) -> None:
        with turns.turn(uid):
            order.append(name)
            if hold is not None:
                first_in.set()
                hold.wait(30)

    holder = threading.Thread(target=take, args=(1, "a0", go))
    holder.start()
    first_in.wait(30)
    threads = []
    for i in range(1, 6):  # user 1 queues five more
        t = threading.Thread(target=take, args=(1, f"a{i}"))
        t.start()
        threads.append(t)
        wait_for(f"a{i} waiting", lambda i=i: turns.waiting == i, interval=0.005)
    b = threading.Thread(target=take, args=(2, "b"))  # user 2 comes last, with one
    b.start()
    wait_for("b waiting", lambda: turns.waiting == 6, interval=0.005)
    go.set()
    for t in [holder, *threads, b]:
        t.join(30)
    assert order[0] == "a0" and order.index("b") <= 2, order  # after at most one more of user 1's
    assert [x for x in order if x.startswith("a")] == [f"a{i}" for i in range(6)]  # each user's in order


def test_a_free_turn_is_taken_at_once() -> None:
    turns = FairTurns()
    start = time.monotonic()
    for uid in range(100):
        with turns.turn(uid):
            pass
    assert turns.waiting == 0 and time.monotonic() - start < 30


def _decide(store: Store, uid: int, n: int, quota: tuple[int, int]) -> None:
    store.add_decision(
        f"t{uid}-{n}", uid, f"u{uid}", JobRequest(job_name="y" * 100), Resources(), Decision(), quota=quota
    )


def test_a_users_unclaimed_decisions_are_bounded_by_count_and_bytes(store, monkeypatch) -> None:
    import harpd.store.decisions as decisions

    for n in range(3):
        _decide(store, 1000, n, (3, 1 << 20))
    with pytest.raises(QuotaExceeded, match=r"uid 1000 has 3 decisions .* store.max_pending_decisions_per_user"):
        _decide(store, 1000, 3, (3, 1 << 20))
    _decide(store, 1001, 0, (3, 1 << 20))  # another user is not affected
    with store.transaction() as db:  # one claimed by its job
        db.conn.execute("UPDATE decisions SET job_id = '7' WHERE token = 't1000-0'")
    with pytest.raises(QuotaExceeded):  # refused again at once, without counting, for QUOTA_RECHECK_S
        _decide(store, 1000, 4, (3, 1 << 20))
    later = decisions.time.monotonic() + decisions.QUOTA_RECHECK_S + 1
    monkeypatch.setattr(decisions.time, "monotonic", lambda: later)
    _decide(store, 1000, 4, (3, 1 << 20))  # counted again: claimed ones do not count
    with pytest.raises(QuotaExceeded, match="KiB"):
        _decide(store, 1002, 0, (100, 100))  # the bytes bound: one decision of ~130 bytes
    assert store.get_decision("t1002-0") is None and store.get_decision("t1000-3") is None


def test_predict_past_the_quota_is_answered_with_why_and_stores_nothing(store) -> None:
    from harpd.config import HarpSettings

    h = Handlers(store, settings=HarpSettings(store={"max_pending_decisions_per_user": 2}))
    peer = Peer(pid=1, uid=4242, gid=4242, user="mallory", groups=(), host=None)
    req = p.parse_request(b'{"op": "predict", "job": {"job_name": "x"}}')
    assert isinstance(h.handle(peer, req), p.PredictAnswer)
    assert isinstance(h.handle(peer, req), p.PredictAnswer)
    ans = h.handle(peer, req)
    assert isinstance(ans, p.ErrorAnswer)
    assert "no more decisions for you" in ans.error and "goes in unchanged" in ans.error and "\n" not in ans.error
    count = store._read("SELECT count(*) FROM decisions WHERE uid = 4242").fetchone()[0]
    assert count == 2


def test_argv_and_environment_are_not_stored_with_a_question(store) -> None:
    h = Handlers(store)
    peer = Peer(pid=1, uid=4242, gid=4242, user="mallory", groups=(), host=None)
    req = p.parse_request(b'{"op": "predict", "job": {"job_name": "x", "argv": ["a", "b"], "sbatch_env": {"A": "1"}}}')
    ans = h.handle(peer, req)
    row = store.get_decision(ans.token)
    assert row is not None and "argv" not in row.job and "sbatch_env" not in row.job


@pytest.mark.parametrize(
    "lines,what",
    [
        (["#HARP dnn params=1e9"] * (p.MAX_HARP_LINES + 1), f"at most {p.MAX_HARP_LINES}"),
        (["#HARP " + "x" * p.MAX_HARP_LINE_CHARS], f"at most {p.MAX_HARP_LINE_CHARS}"),
    ],
)
def test_a_request_with_too_many_or_too_long_harp_lines_is_refused_in_one_line(lines, what) -> None:
    import json

    with pytest.raises(p.ProtocolError) as err:
        p.parse_request(json.dumps({"op": "predict", "job": {"harp_lines": lines}}))
    assert "\n" not in str(err.value) and "harp_lines" in str(err.value), str(err.value)
    assert what in str(err.value) or "too long" in str(err.value) or "characters" in str(err.value), str(err.value)


@pytest.mark.parametrize("value", ["9" * 490, "1e999", "1e400B"])
def test_a_number_too_large_for_a_float_is_a_one_line_error(value) -> None:
    """#44's bench found it: params=999...9 (490 digits) overflowed round() inside the decision."""
    from harpd.dnn.errors import DnnError
    from harpd.dnn.spec import parse_count

    with pytest.raises(DnnError, match=r"#HARP dnn: params=.* is out of range"):
        parse_count("params", value, hi=10**14)


def test_commands_are_bounded_as_harp_submit_sends_them() -> None:
    import json

    from harp_submit.request import COMMAND_LINES, COMMANDS_MAX_CHARS

    many = json.dumps({"op": "predict", "job": {"commands": ["python a.py"] * 100}})
    assert len(p.parse_request(many).job.commands) == COMMAND_LINES
    long = json.dumps({"op": "predict", "job": {"commands": ["x" * 4000, "y" * 4000, "z"]}})
    got = p.parse_request(long).job.commands
    assert sum(map(len, got)) == COMMANDS_MAX_CHARS and got[0] == "x" * 4000 and got[1] == "y" * 96
