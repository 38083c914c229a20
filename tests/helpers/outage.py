"""A load of harp-submit runs through a harpd outage: every job must land exactly once.

Shared by the Unix-socket test (harpd SIGKILLed) and the TCP one (harpd
stopped and started on the same port): the load, the outage in its middle,
and the checks that nothing was lost, duplicated or left unexplained.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

from load_submit import Load, check_landing, submit_all  # noqa: E402


def submit_through_outage(
    down: Callable[[], None], up: Callable[[], None], names: list[str], env: dict[str, str], cwd: Path, token: str
) -> Load:
    """``names`` submitted from 10 clients; ``down()`` after 20 have finished, ``up()`` after 40."""
    events: list[str] = []
    lock = threading.Lock()

    def progress(n: int) -> None:
        with lock:
            if n >= 20 and not events:
                down()
                events.append("down")
            elif n >= 40 and events == ["down"]:
                up()
                events.append("up")

    load = submit_all(names, 10, env, cwd, token, on_progress=progress)
    assert events == ["down", "up"]
    landing = check_landing(load, names, env)
    assert (landing.missing, landing.duplicated, landing.id_mismatch) == ([], [], [])
    assert landing.exactly_once == len(names)
    assert [r for r in load.results if r.rc != 0] == []
    failed_open = [r for r in load.results if r.stderr]
    assert failed_open, "no submission met the absent harpd: the outage came too late to prove anything"
    for r in failed_open:  # each says why, once, and submitted unchanged
        assert r.stderr.startswith("harp: ") and r.stderr.endswith("; submitting your job unchanged\n"), r.stderr
        assert r.stderr.count("\n") == 1
    return load
