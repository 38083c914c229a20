"""A flood of idle TCP connections does not turn harp off (real harpd, the cluster's munged).

Anyone who reaches harpd's port can open hundreds of connections and send
nothing.  Here 500 of them, from 25 loopback "hosts", each reopened as harpd
closes it (``bench/_flood.py``: loopback only, bounded in count and time),
while an ordinary user's harp-submit over TCP must get harpd's decision and
register its job, and a Unix-socket ``status`` must be answered.  harpd's log
must name the flood's peers without a line per connection.
``bench/tcp_flood.py`` measures how fast those answers come.
"""

from __future__ import annotations

import sys
import time
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

from _flood import IdleFlood, loopback_sources  # noqa: E402

from harp_submit import client  # noqa: E402
from tests.helpers.users import ensure_user  # noqa: E402
from tests.slurm.test_load_faults import cleanup_tokens as tokens  # noqa: E402,F401  (the fixture: jobs cancelled)
from tests.slurm.test_tcp_munge import (  # noqa: E402,F401  (fixtures)
    RUN_SUBMIT,
    USER,
    as_user,
    munge_socket,
    tcp_env,
    tcp_harpd,
    wait_log,
    work,
)

pytestmark = pytest.mark.slurm

FLOOD, HOSTS, FLOOD_S = 500, 25, 240.0


def test_idle_flood_leaves_tcp_submissions_and_the_unix_socket_answered(
    slurm_cluster, work, tcp_harpd, munge_socket, tokens
) -> None:
    h = tcp_harpd
    uid = ensure_user(USER).pw_uid
    port = int((h.listen or "").rsplit(":", 1)[1])
    env = tcp_env(slurm_cluster, h, munge_socket)
    token = f"harp-flood-{uuid.uuid4().hex[:8]}"
    tokens.append(token)
    lines_before = len(h.log.read_text(errors="replace").splitlines())
    with IdleFlood(port, FLOOD, loopback_sources(HOSTS), FLOOD_S) as flood:
        assert flood.wait_held(300, timeout=60) >= 300, "the flood never held 300 connections"
        started = time.monotonic()
        user = as_user(
            USER, env, ["-c", RUN_SUBMIT, "--parsable", "-H", "-J", f"{token}-u", f"--comment={token}", "job.sh"], work
        )
        try:
            status = client.call(h.socket, {"op": "health"}, 30)
        except client.HarpdUnavailable as exc:
            pytest.fail(f"the Unix socket was not answered under the flood: {exc.reason}")
        try:
            client.call(h.socket, {"op": "status", "job_id": "1"}, 30)
        except client.HarpdUnavailable as exc:  # "harp knows no job 1" is an answer; busy or a timeout is not
            assert exc.final, f"status on the Unix socket not answered under the flood: {exc.reason}"
        assert time.monotonic() - started < FLOOD_S / 2  # all of it while the flood went on
        held_during = flood.held
        opened = flood.opened
    assert held_during > 0 and opened > FLOOD
    # harpd answered the user: no fail-open line, a job id, the prediction and registration as that uid
    assert user.returncode == 0 and user.stderr == "", user.stderr
    assert user.stdout.strip().split(";")[0].isdigit(), user.stdout
    wait_log(h, f"predict uid={uid} from 127.0.0.1:")
    assert " ok " in wait_log(h, f"register uid={uid} from 127.0.0.1:")
    assert status is not None and status["ok"] is True
    # the log: the flood's peers named, thousands of refusals in a few lines
    lines = h.log.read_text(errors="replace").splitlines()[lines_before:]
    refusals = [ln for ln in lines if "refused" in ln]
    assert refusals and any("127.0.1." in ln for ln in refusals), lines[-20:]
    assert len(refusals) <= 4 + 2 * int((time.monotonic() - started) / 10 + 1), refusals[:10]
    assert "Traceback" not in h.log.read_text(errors="replace")
    busy = [ln for ln in lines if "busy" in ln]
    assert not busy, busy[:3]  # idle sockets never took a worker slot
