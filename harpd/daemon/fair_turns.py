"""Decisions one at a time, taken in turns by user, so one user's flood never delays another's answer.

harpd decides one request at a time (``Handlers.op_predict`` says why: pure
Python, so threads only interleave).  A plain lock hands the next turn to
whichever waiting thread the OS wakes, so a user with fifty requests queued
(a workflow, or someone flooding the socket) gets almost every turn and a
single request of another user waits behind all of them (#44).  Here the
waiters queue per uid and the turns go round the uids with a waiter, oldest
first within a uid: another user's request waits for at most one request
of each user already waiting, whatever they have queued.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["FairTurns"]


class FairTurns:
    """A lock whose next holder is chosen round-robin over the uids waiting for it."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._busy = False
        self._queues: OrderedDict[int, deque[object]] = OrderedDict()  # uid -> its waiters, oldest first
        self._next: object | None = None  # the waiter whose turn it is

    @contextmanager
    def turn(self, uid: int) -> Iterator[None]:
        """Hold the turn for ``uid``'s request while the block runs."""
        me = object()
        with self._cond:
            if not self._busy and not self._queues:
                self._busy = True
            else:
                self._queues.setdefault(uid, deque()).append(me)
                while self._next is not me:
                    self._cond.wait()
                self._next = None
        try:
            yield
        finally:
            with self._cond:
                self._hand_on()

    def _hand_on(self) -> None:
        """Give the turn to the oldest waiter of the next uid in the round (or free it)."""
        if not self._queues:
            self._busy = False
            return
        uid, waiters = next(iter(self._queues.items()))
        self._next = waiters.popleft()
        del self._queues[uid]
        if waiters:  # the uid goes to the back of the round with its remaining waiters
            self._queues[uid] = waiters
        self._cond.notify_all()

    @property
    def waiting(self) -> int:
        with self._cond:
            return sum(len(q) for q in self._queues.values())
