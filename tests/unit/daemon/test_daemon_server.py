"""The socket server: identity, limits, isolation of bad clients, socket file handling."""

from __future__ import annotations

import dataclasses
import json
import os
import select
import socket
import stat
import threading
import time

import pytest
from daemon_helpers import as_nobody, call, read_answer

from harpd import protocol as p
from harpd.config import ServerSettings
from harpd.daemon.handlers import AdminActions, Handlers
from harpd.daemon.server import Server, ServerError, ServerLimits
from tests.helpers.fake_slurm import FakeSlurm
from tests.helpers.wait import wait_for

HEALTH = {"v": 1, "op": "health"}
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to drop to nobody")


def test_health_over_the_socket(serve):
    srv = serve()
    ans = srv.call(HEALTH)
    assert ans["ok"] is True and ans["store"] == "ok" and ans["version"]


def test_malformed_json_gets_an_error_and_the_daemon_keeps_serving(serve):
    srv = serve()
    for bad in (b"{not json\n", b"\xff\xff\n", b"[]\n", b'{"op": "nope"}\n', b"null\n"):
        ans = srv.call(bad)
        assert ans["ok"] is False and isinstance(ans["error"], str) and ans["error"]
    assert srv.call(HEALTH)["ok"] is True


def test_request_without_newline_but_closed_write_side_is_served(serve):
    srv = serve()
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(srv.path)
        s.sendall(json.dumps(HEALTH).encode())
        s.shutdown(socket.SHUT_WR)
        assert read_answer(s)["ok"] is True


def test_oversized_request_gets_an_error(serve):
    srv = serve()  # default limit: 1 MiB
    big = json.dumps({"op": "predict", "job": {"harp_lines": ["x" * (1 << 20)]}}).encode() + b"\n"
    ans = srv.call(big, timeout=30)
    assert ans["ok"] is False and "request over 1048576 bytes" in ans["error"]
    assert srv.call(HEALTH)["ok"] is True


def test_oversized_request_without_newline(serve):
    srv = serve(max_request_bytes=1000)
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(srv.path)
        s.sendall(b"{" + b" " * 5000)  # never a newline, never closes
        ans = read_answer(s)
    assert ans["ok"] is False and "request over 1000 bytes" in ans["error"]


def test_just_under_the_limit_is_accepted(serve):
    srv = serve(max_request_bytes=2000)
    body = {"op": "predict", "job": {"job_name": ""}}
    pad = 2000 - len(json.dumps(body))
    body["job"]["job_name"] = "x" * pad
    raw = json.dumps(body).encode()
    assert len(raw) == 2000
    assert srv.call(raw + b"\n")["ok"] is True


def test_stalled_client_does_not_block_a_second_client(serve):
    srv = serve(request_timeout_s=5)
    stalled = socket.socket(socket.AF_UNIX)
    stalled.connect(srv.path)
    stalled.sendall(b'{"op": "hea')  # and then nothing
    try:
        for _ in range(3):
            assert srv.call(HEALTH)["ok"] is True
        # the stalled client is still waiting: nothing has been answered to it yet
        readable, _, _ = select.select([stalled], [], [], 0)
        assert readable == []
        stalled.settimeout(30)
        ans = read_answer(stalled)  # eventually: the deadline error
        assert ans["ok"] is False and "not complete within 5s" in ans["error"]
    finally:
        stalled.close()


def test_trickling_client_is_cut_off_at_the_total_deadline(serve):
    srv = serve(request_timeout_s=1)
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(srv.path)
        s.settimeout(30)
        got = None
        start = time.monotonic()
        for ch in json.dumps(HEALTH):  # one byte every 0.2 s: every recv is "recent"
            try:
                s.sendall(ch.encode())
            except OSError:
                break
            r, _, _ = select.select([s], [], [], 0.2)
            if r:
                got = read_answer(s)
                break
        if got is None:
            got = read_answer(s)
        assert time.monotonic() - start < 10
    assert got["ok"] is False and "not complete within 1s" in got["error"]


def test_client_that_connects_and_leaves(serve):
    srv = serve()
    for _ in range(5):
        s = socket.socket(socket.AF_UNIX)
        s.connect(srv.path)
        s.close()
    assert srv.call(HEALTH)["ok"] is True


class _Holding(Handlers):
    """``op`` requests (``status``) wait until ``release`` is set: requests in progress that hold a worker each."""

    def __init__(self, store, op: str = "status"):
        super().__init__(store)
        self.op = op
        self.release = threading.Event()
        self.inside = 0
        self._lock = threading.Lock()

    def handle(self, peer, req):
        if req.op == self.op:
            with self._lock:
                self.inside += 1
            self.release.wait(60)
            with self._lock:
                self.inside -= 1
        return super().handle(peer, req)


def _send_status(path):
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    s.sendall(b'{"op": "status", "job_id": "1"}\n')
    return s


def test_max_clients_answers_busy_instead_of_queueing(serve, store):
    h = _Holding(store)
    srv = serve(handlers=h, max_clients=2, request_timeout_s=10)
    hold = []
    try:
        hold = [_send_status(srv.path) for _ in range(2)]
        wait_for("two requests in progress", lambda: h.inside >= 2, interval=0.01)
        ans = srv.call(HEALTH)
        assert ans["ok"] is False and "busy" in ans["error"]
    finally:
        h.release.set()
        for s in hold:
            s.close()
    wait_for("the held requests to end", lambda: srv.server.active == 0, interval=0.01)
    assert srv.call(HEALTH)["ok"] is True


def test_idle_connections_hold_no_worker(serve):
    """A Unix connection waits in the accept loop until its request is whole (#44: 200 idle ones made harpd busy)."""
    srv = serve(max_clients=2, request_timeout_s=10)
    idle = []
    try:
        for _ in range(12):
            s = socket.socket(socket.AF_UNIX)
            s.connect(srv.path)
            s.sendall(b'{"v":1,')  # and then nothing
            idle.append(s)
        for _ in range(3):
            assert srv.call(HEALTH)["ok"] is True
        wait_for("no worker held", lambda: srv.server.active == 0, interval=0.01)
    finally:
        for s in idle:
            s.close()


@needs_root
def test_one_users_connections_never_make_harpd_busy_for_root(serve, store):
    """A user gets at most max_clients_per_user requests served and max_waiting_per_user waiting at once;
    root's (and the admin's) requests are answered all the while."""
    h = _Holding(store)
    srv = serve(handlers=h, max_clients=6, max_clients_per_user=2, max_waiting_per_user=3, root_reserved_clients=2)

    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        os.setgroups([])
        os.setgid(65534)
        os.setuid(65534)
        held = [_send_status(srv.path) for _ in range(2)]  # kept open (and referenced) until the child is killed
        idle = []
        for _ in range(8):
            s = socket.socket(socket.AF_UNIX)
            s.connect(srv.path)
            idle.append(s)
        third = call(srv.path, {"op": "status", "job_id": "1"})
        os.write(w, json.dumps(third).encode())
        assert len(held) == 2 and len(idle) == 8
        os.close(w)
        time.sleep(30)  # holds its connections until the parent kills it
        os._exit(0)
    os.close(w)
    try:
        third = json.loads(os.read(r, 65536) or b"{}")
        assert third.get("ok") is False and "you already have 2 requests in progress" in third["error"]
        wait_for("the user's two requests in progress", lambda: h.inside >= 2, interval=0.01)
        for _ in range(3):  # root is answered while the user holds its cap and a pile of idle connections
            assert srv.call(HEALTH)["ok"] is True
        wait_for("only the user's two requests held", lambda: srv.server.active == 2, interval=0.01)
        assert len(srv.server.unix_waiting) <= 3
    finally:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        os.close(r)
        h.release.set()


def test_many_concurrent_clients_all_answered(serve):
    srv = serve(max_clients=64)
    results = []

    def one():
        results.append(srv.call(HEALTH)["ok"])

    ts = [threading.Thread(target=one) for _ in range(40)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert results.count(True) + results.count(False) == 40
    assert results.count(True) >= 1 and all(isinstance(r, bool) for r in results)


def test_a_handler_crash_is_answered_and_contained(serve, store):
    class Exploding(Handlers):
        def handle(self, peer, req):
            if req.op == "status":
                raise RuntimeError("bug")
            return super().handle(peer, req)

    srv = serve(handlers=Exploding(store))
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(srv.path)
        s.sendall(b'{"op": "status", "job_id": "1"}\n')
        s.settimeout(10)
        assert s.recv(100) == b""  # connection closed, no hang
    assert srv.call(HEALTH)["ok"] is True


def test_an_answer_that_cannot_be_encoded_is_reported(serve, store):
    class Weird(Handlers):
        def handle(self, peer, req):
            return p.StatusAnswer.model_construct(ok=True, job={"x": object()})

    srv = serve(handlers=Weird(store))
    ans = srv.call({"op": "status", "job_id": "1"})
    assert ans["ok"] is False and "internal error" in ans["error"]


# ----------------------------------------------------- identity (SO_PEERCRED)


@needs_root
def test_identity_comes_from_the_kernel(serve, store):
    slurm = FakeSlurm()
    slurm.add("500", 65534, time_s=600)
    srv = serve(handlers=Handlers(store, slurm=slurm))
    reg = {"op": "register", "job_id": "500", "job": {}, "original": {}, "submitted": {}}
    out = as_nobody(
        lambda: {
            "register": call(srv.path, reg),
            "status": call(srv.path, {"op": "status", "job_id": "500"}),
            "retrain": call(srv.path, {"op": "retrain"}),
        }
    )
    assert out["register"] == {"ok": True}, out
    assert out["status"]["ok"] is True and out["status"]["job"]["uid"] == 65534
    assert out["status"]["job"]["user"] == "nobody"
    assert out["retrain"]["ok"] is False and "admin operation" in out["retrain"]["error"]
    assert store.get_submission("500").uid == 65534


@needs_root
def test_a_user_cannot_see_or_take_over_roots_job(serve, store):
    slurm = FakeSlurm()
    slurm.add("600", 0, time_s=600)
    srv = serve(handlers=Handlers(store, slurm=slurm))
    assert srv.call({"op": "register", "job_id": "600", "job": {}, "original": {}, "submitted": {}}) == {"ok": True}
    out = as_nobody(
        lambda: {
            "status": call(srv.path, {"op": "status", "job_id": "600"}),
            "register": call(srv.path, {"op": "register", "job_id": "600", "job": {}, "original": {}, "submitted": {}}),
        }
    )
    assert out["status"]["ok"] is False and "not yours" in out["status"]["error"]
    assert out["register"]["ok"] is False
    assert store.get_submission("600").uid == 0


@needs_root
def test_admin_group_member_may_retrain(serve, store):
    h = Handlers(store, admin_gid=65534, actions=AdminActions(retrain=lambda: {"done": True}))
    srv = serve(handlers=h)
    out = as_nobody(lambda: call(srv.path, {"op": "retrain"}))
    assert out == {"ok": True, "message": "retrain done", "result": {"done": True}}


@needs_root
def test_socket_mode_is_applied_and_enforced(serve):
    srv = serve(mode=0o600)
    assert stat.S_IMODE(os.stat(srv.path).st_mode) == 0o600
    out = as_nobody(lambda: call(srv.path, HEALTH))
    assert "PermissionError" in out["child_error"]
    assert srv.call(HEALTH)["ok"] is True


# ---------------------------------------------------------------- socket file


def test_parent_dir_created_and_socket_removed_at_shutdown(short_dir, store):
    path = short_dir / "run" / "harp" / "h.sock"
    srv = Server(path, Handlers(store), mode=0o666)
    srv.bind()
    assert stat.S_ISSOCK(os.stat(path).st_mode)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o666
    t = threading.Thread(target=srv.serve_forever)
    t.start()
    assert call(str(path), HEALTH)["ok"] is True
    srv.shutdown()
    t.join(15)
    assert not t.is_alive()
    assert not path.exists()
    srv.close()


def test_stale_socket_is_replaced(short_dir, store):
    path = short_dir / "h.sock"
    dead = socket.socket(socket.AF_UNIX)
    dead.bind(str(path))  # a socket file nobody listens on (a killed harpd)
    dead.close()
    assert path.exists()
    srv = Server(path, Handlers(store))
    srv.bind()
    t = threading.Thread(target=srv.serve_forever)
    t.start()
    try:
        assert call(str(path), HEALTH)["ok"] is True
    finally:
        srv.shutdown()
        t.join(15)
        srv.close()


def test_refuses_to_start_beside_a_live_harpd(serve, store):
    first = serve()
    second = Server(first.path, Handlers(store))
    with pytest.raises(ServerError, match="another harpd is already serving"):
        second.bind()
    second.close()
    assert first.call(HEALTH)["ok"] is True  # the first one is untouched


def test_refuses_a_path_that_is_not_a_socket(short_dir, store):
    path = short_dir / "h.sock"
    path.write_text("important")
    with pytest.raises(ServerError, match="not a socket"):
        Server(path, Handlers(store)).bind()
    assert path.read_text() == "important"


def test_socket_path_too_long(short_dir, store):
    with pytest.raises(ServerError, match="longer than 107"):
        Server(short_dir / ("x" * 120), Handlers(store)).bind()


def test_shutdown_does_not_remove_a_newer_harpds_socket(short_dir, store):
    path = short_dir / "h.sock"
    old = Server(path, Handlers(store))
    old.bind()
    os.unlink(path)  # an admin removed it and a new harpd took the path
    new = Server(path, Handlers(store))
    new.bind()
    old.close()
    assert path.exists()
    new.close()
    assert not path.exists()


def test_the_harp_submit_client_speaks_this_protocol(serve, store):
    client = pytest.importorskip("harp_submit.client")
    slurm = FakeSlurm()
    slurm.add("7", os.geteuid(), time_s=600)
    srv = serve(handlers=Handlers(store, slurm=slurm))
    ans = client.call(srv.path, {"op": "predict", "job": {"partition": "cpu", "request": {"time_s": 60}}}, 10.0)
    assert ans["decision"]["changes"] == []
    assert client.call(
        srv.path, {"op": "register", "job_id": "7", "job": {}, "original": {}, "submitted": {}}, 10.0
    ) == {"ok": True}
    with pytest.raises(client.HarpdUnavailable, match="knows no job 8"):
        client.call(srv.path, {"op": "status", "job_id": "8"}, 10.0)


def _registration(job_id: str) -> dict:
    return {"op": "register", "job_id": job_id, "job": {}, "original": {}, "submitted": {}}


def test_registrations_take_at_most_half_the_workers(serve, store):
    """A burst of registrations waiting on slurmctld leaves workers to predictions (else: busy, job unchanged)."""
    h = _Holding(store, "register")  # as registrations wait on a slow slurmctld
    srv = serve(handlers=h, max_clients=4, request_timeout_s=10)
    held = []
    try:
        for n in range(2):
            s = socket.socket(socket.AF_UNIX)
            s.connect(srv.path)
            s.sendall(json.dumps(_registration(str(100 + n))).encode() + b"\n")
            held.append(s)
        wait_for("two registrations in progress", lambda: h.inside == 2, interval=0.01)
        third = srv.call(_registration("102"))
        assert third["ok"] is False and "2 registrations in progress" in third["error"]
        assert srv.call(HEALTH)["ok"] is True  # the other half: answered while the registrations wait
        assert srv.call(HEALTH)["ok"] is True
    finally:
        h.release.set()
        for s in held:
            s.close()
    wait_for("the registrations' workers back", lambda: srv.server.active == 0, interval=0.01)
    assert srv.server._registering == 0


def test_harpd_serves_with_every_server_limit_it_was_configured_with(short_dir):
    """``ServerLimits.from_settings`` copies each of [server]'s limits: a field it dropped would keep a default."""
    limits = {f.name for f in dataclasses.fields(ServerLimits)}
    assert limits <= set(ServerSettings.model_fields), "a server limit with no [server] setting"
    # every setting off its default (and off the server's own), so a missed one shows
    given = ServerSettings(
        request_timeout_s=7.5,
        max_request_bytes=12345,
        max_clients=40,
        auth_timeout_s=3.5,
        max_unauthenticated=300,
        max_unauthenticated_per_peer=9,
        unix_reserved_clients=5,
        refusal_log_interval_s=20.0,
        max_clients_per_user=6,
        max_waiting_per_user=11,
        root_reserved_clients=3,
    )
    got = ServerLimits.from_settings(given)
    for name in limits:
        assert getattr(got, name) == getattr(given, name), name
        assert getattr(got, name) != getattr(ServerLimits(), name), f"{name}: pick a value off the default"
    srv = Server(short_dir / "s.sock", None, limits=got)
    assert (srv.max_clients, srv.max_tcp_clients, srv.request_timeout_s) == (40, 35, 7.5)
    assert (srv.max_clients_per_user, srv.root_reserved_clients, srv.max_request_bytes) == (6, 3, 12345)


def test_a_server_without_settings_keeps_a_quarter_of_its_slots_for_the_unix_socket(short_dir):
    """Built without settings (tests, benches): unix_reserved_clients None is max_clients // 4 (the setting's is 16)."""
    assert Server(short_dir / "a.sock", None).max_tcp_clients == 48
    assert Server(short_dir / "b.sock", None, limits=ServerLimits(max_clients=2)).max_tcp_clients == 2
    assert Server(short_dir / "c.sock", None, limits=ServerLimits.from_settings(ServerSettings())).max_tcp_clients == 48
