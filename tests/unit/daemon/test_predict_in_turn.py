"""Predictions are decided one at a time (``Handlers.op_predict``); other operations never wait for them."""

from __future__ import annotations

import json
import threading
import time

from harpd import protocol as p
from harpd.daemon.handlers import Handlers, Peer

ALICE = Peer(pid=10, uid=1000, gid=1000, user="alice", groups=frozenset({1000}))


def _req(obj: dict) -> object:
    return p.parse_request(json.dumps({"v": 1, **obj}))


class Gate:
    """A predictor that counts how many decisions run at once, and can hold them."""

    name = "gate"

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running = 0
        self.most = 0
        self.entered = threading.Event()
        self.release = threading.Event()
        self.release.set()

    def decide(self, job, user, uid):
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
        self.entered.set()
        self.release.wait(60)
        time.sleep(0.005)  # lets another thread run: without the turn, it would decide meanwhile
        with self.lock:
            self.running -= 1
        return p.Decision(changes=[], limits=p.Limits(partition=None), model="gate")


def test_decisions_never_overlap(store) -> None:
    gate = Gate()
    h = Handlers(store, predictor=gate)
    answers: list[object] = []

    def one() -> None:
        answers.append(h.handle(ALICE, _req({"op": "predict", "job": {"job_name": "j"}})))

    threads = [threading.Thread(target=one) for _ in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert len(answers) == 12 and all(isinstance(a, p.PredictAnswer) for a in answers)
    assert gate.most == 1


def test_health_answers_while_a_decision_holds_the_turn(store) -> None:
    gate = Gate()
    gate.release.clear()
    h = Handlers(store, predictor=gate)
    t = threading.Thread(target=lambda: h.handle(ALICE, _req({"op": "predict", "job": {}})))
    t.start()
    try:
        assert gate.entered.wait(60)
        got: list[object] = []
        other = threading.Thread(target=lambda: got.append(h.handle(ALICE, _req({"op": "health"}))))
        other.start()
        other.join(60)
        assert got and isinstance(got[0], p.HealthAnswer)
    finally:
        gate.release.set()
        t.join(60)
