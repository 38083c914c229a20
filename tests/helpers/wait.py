"""Waiting on a condition in tests: the one loop every test uses instead of a fixed sleep.

A test on a busy two-core machine cannot know how long a process, a thread
or a Slurm job takes; it can only know what it is waiting for.  ``wait_for``
polls ``check`` until it returns something truthy and hands that back, or
fails at a generous deadline with an AssertionError that names what was
awaited, the last value seen and, when given, the end of the log that
explains why it never came.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

DEFAULT_TIMEOUT_S = 60.0


def wait_for(
    what: str,
    check: Callable[[], T],
    timeout: float = DEFAULT_TIMEOUT_S,
    interval: float = 0.05,
    log: Callable[[], str] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """``check()``'s first truthy value, polled every ``interval`` s for up to ``timeout`` s.

    ``check`` is always called at least once and once more after the deadline
    has passed, so a slow machine that lets the deadline pass during one sleep
    still sees the condition.  On failure the AssertionError says ``what`` was
    awaited, the last value ``check`` returned, and ``log()`` (the tail of the
    process's log that explains the wait) when ``log`` is given.
    """
    end = clock() + timeout
    while True:
        got = check()
        if got:
            return got
        if clock() > end:
            break
        sleep(interval)
    message = f"{what}: not within {timeout:g} s (last value {got!r})"
    if log is not None:
        try:
            tail = log()
        except OSError as exc:  # the log itself is gone: say so rather than hide the timeout
            tail = f"(log unreadable: {exc})"
        if tail:
            message += "\n" + tail
    raise AssertionError(message)
