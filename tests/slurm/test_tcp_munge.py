"""One harpd for the cluster over TCP, authenticated by the cluster's real munged.

Every client here reaches harpd only over TCP (HARP_SOCKET names no socket),
as from a login or compute node: its uid comes from MUNGE, never from the
message.  The cluster's munged is the one slurm.conf names (AuthInfo).

* harp-submit as root and as a second Unix user: predicted, registered as
  that user (harpd checks the Slurm owner against the MUNGE uid), the user's
  ``harp status`` / ``harp report`` over TCP, admin operations by uid;
* forged, replayed, expired, tampered and foreign-key credentials refused in
  one line each, logged with the peer's address;
* a port squatter (another user with the same munged) answering with limits:
  not believed, the job goes in unchanged;
* harpd restarted in the middle of a load over TCP: every submission lands
  exactly once.
"""

from __future__ import annotations

import os
import pwd
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "tests" / "unit" / "submit"))

from load_submit import Harpd, client_env  # noqa: E402
from submit_fakes import change, decision  # noqa: E402

from harp_submit import client, sealed  # noqa: E402
from harp_submit.munge import Munge  # noqa: E402
from tests.helpers.munge_env import cluster_munge_socket, foreign_munged, free_port  # noqa: E402
from tests.helpers.outage import submit_through_outage  # noqa: E402
from tests.helpers.processes import short_tmpdir  # noqa: E402
from tests.helpers.users import ensure_user, user_python  # noqa: E402
from tests.helpers.wait import wait_for  # noqa: E402
from tests.slurm.test_load_faults import cleanup_tokens as tokens  # noqa: E402,F401  (the fixture: jobs cancelled)

pytestmark = pytest.mark.slurm

USER = "harptest1"
RUN_SUBMIT = "import sys; from harp_submit.cli import main; sys.exit(main())"
RUN_HARP = "import sys; from harpd.cli.main import main; sys.exit(main())"
JOB = "#!/bin/bash\n#SBATCH --time=5\n#SBATCH -o /dev/null\n#SBATCH -p short\ntrue\n"
SQUATTER = r"""
import socket, sys
from harp_submit.munge import Munge
from harp_submit.sealed import seal_answer
port, munge_socket, answer = int(sys.argv[1]), sys.argv[2], sys.argv[3].encode()
munge = Munge(munge_socket)
listener = socket.create_server(("127.0.0.1", port))
print("listening", flush=True)
conn, _ = listener.accept()
data = b""
while data.count(b"\n") < 2:
    data += conn.recv(65536)
cred = data.split(b"\n")[0]
payload, _, _ = munge.decode(cred)       # the squatter shares the cluster's munged: it can read the request
nonce = payload.split(b" ")[2]
conn.sendall(seal_answer(munge, nonce, answer))   # ... and seal an answer to it, but as itself
conn.close()
print("answered", flush=True)
"""


@pytest.fixture
def work():
    with short_tmpdir("htc-") as d:
        os.chmod(d, 0o1777)
        (d / "job.sh").write_text(JOB)
        os.chmod(d / "job.sh", 0o644)
        yield d


@pytest.fixture
def munge_socket(slurm_cluster) -> str:
    sock = cluster_munge_socket(slurm_cluster.conf)
    Munge(sock).check()  # the cluster's munged must work, or nothing here means anything
    return sock


@pytest.fixture
def tcp_harpd(slurm_cluster, work, munge_socket):
    """A real harpd serving TCP on a free loopback port with the cluster's munged."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HARP_", "SLURM_"))}
    env.update({"SLURM_CONF": str(slurm_cluster.conf), "PYTHONPATH": str(REPO)})
    (work / "d").mkdir()
    h = Harpd(work / "d", env, "debug", listen=f"127.0.0.1:{free_port()}", munge_socket=munge_socket)
    h.start()
    yield h
    h.stop()


def tcp_env(cluster, h: Harpd, munge_socket: str) -> dict[str, str]:
    """harp-submit's environment on a node without harpd: only HARP_SERVERS leads to it.

    PATH is a user's of the node (the release's Slurm commands first), for root and ``as_user`` alike.
    """
    env = client_env(str(cluster.conf), "/nonexistent/harpd.sock")
    env.update({"HARP_SERVERS": h.listen or "", "HARP_MUNGE_SOCKET": munge_socket, "PATH": cluster.user_path})
    return env


def as_user(user: str, env: dict[str, str], argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """``argv`` (python -c ...) as ``user``, with a clean environment plus ``env``'s HARP/SLURM settings and PATH."""
    py, pythonpath = user_python(user)
    home = pwd.getpwnam(user).pw_dir
    keep = {k: v for k, v in env.items() if k.startswith(("HARP_", "SLURM_"))}
    cmd = [
        "runuser",
        "-u",
        user,
        "--",
        "env",
        "-i",
        f"HOME={home}",
        f"USER={user}",
        f"PATH={env.get('PATH', '/usr/bin:/bin')}",
        f"PYTHONPATH={pythonpath}",
        *[f"{k}={v}" for k, v in keep.items()],
        py,
        *argv,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=str(cwd), timeout=120, stdin=subprocess.DEVNULL)


def wait_log(h: Harpd, needle: str, timeout: float = 60) -> str:
    def logged() -> str | None:
        return next((line for line in h.log.read_text(errors="replace").splitlines() if needle in line), None)

    return wait_for(f"harpd to log {needle!r}", logged, timeout, interval=0.2, log=lambda: h.log.read_text()[-3000:])


# ------------------------------------------------------------- users over TCP


def test_harp_submit_over_tcp_as_root_and_as_a_second_user(
    slurm_cluster, work, tcp_harpd, munge_socket, tokens
) -> None:
    h = tcp_harpd
    uid = ensure_user(USER).pw_uid
    env = tcp_env(slurm_cluster, h, munge_socket)
    token = f"harp-tcp-{uuid.uuid4().hex[:8]}"
    tokens.append(token)

    root = subprocess.run(
        [sys.executable, "-c", RUN_SUBMIT, "--parsable", "-J", f"{token}-root", f"--comment={token}", "job.sh"],
        capture_output=True,
        text=True,
        env=env,
        cwd=str(work),
        timeout=120,
    )
    assert root.returncode == 0 and root.stderr == "", root.stderr  # harpd answered: no fail-open line
    root_job = root.stdout.strip().split(";")[0]
    user = as_user(
        USER, env, ["-c", RUN_SUBMIT, "--parsable", "-J", f"{token}-user", f"--comment={token}", "job.sh"], work
    )
    assert user.returncode == 0 and user.stderr == "", user.stderr
    user_job = user.stdout.strip().split(";")[0]
    assert root_job.isdigit() and user_job.isdigit()

    # identity from MUNGE: predict and register as each uid, from the peer's address
    wait_log(h, "predict uid=0 from 127.0.0.1:")
    wait_log(h, f"predict uid={uid} from 127.0.0.1:")
    wait_log(h, "register uid=0 from 127.0.0.1:")
    line = wait_log(h, f"register uid={uid} from 127.0.0.1:")
    assert " ok " in line, line  # harpd checked the job's Slurm owner against the MUNGE uid

    # the user sees their own job, not root's; report is theirs; admin operations are root's.
    # `harp` reads the node's harpd.toml, as on a login node: [client] servers, no local store
    node_toml = work / "node-harpd.toml"
    node_toml.write_text(
        f'[server]\nsocket = "/nonexistent/harpd.sock"\n[store]\npath = "/nonexistent/harp.db"\n'
        f'[client]\nservers = ["{h.listen}"]\n[munge]\nsocket = "{munge_socket}"\n'
    )
    node_toml.chmod(0o644)
    env = {
        **{k: v for k, v in env.items() if k not in ("HARP_SERVERS", "HARP_MUNGE_SOCKET")},
        "HARP_CONFIG": str(node_toml),
    }
    mine = as_user(USER, env, ["-c", RUN_HARP, "status", user_job], work)
    assert mine.returncode == 0 and user_job in mine.stdout, mine.stdout + mine.stderr
    theirs = as_user(USER, env, ["-c", RUN_HARP, "status", root_job], work)
    assert theirs.returncode != 0 and "Traceback" not in theirs.stderr
    report = as_user(USER, env, ["-c", RUN_HARP, "report", "--format", "json"], work)
    assert report.returncode == 0, report.stderr
    refused = as_user(USER, env, ["-c", RUN_HARP, "reload"], work)
    assert refused.returncode != 0 and "admin" in refused.stderr.lower(), refused.stderr
    reload_ = subprocess.run(
        [sys.executable, "-c", RUN_HARP, "reload"], capture_output=True, text=True, env=env, cwd=str(work), timeout=120
    )
    assert reload_.returncode == 0, reload_.stderr
    wait_log(h, "reload uid=0 from 127.0.0.1:")


# ------------------------------------------------------------ bad credentials


def _exchange(port: int, data: bytes) -> list[bytes]:
    import socket

    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(data)
        buf = b""
        while chunk := s.recv(65536):
            buf += chunk
    return buf.split(b"\n")[:-1]


def test_forged_replayed_expired_tampered_and_foreign_credentials_are_refused(tcp_harpd, munge_socket, work) -> None:
    h = tcp_harpd
    port = int((h.listen or "").rsplit(":", 1)[1])
    munge = Munge(munge_socket)
    body = b'{"v":1,"op":"health"}'

    good, nonce = sealed.seal_request(munge, body)
    cred, answer = _exchange(port, good)
    sealed.open_answer(munge, nonce, cred, answer, (0,))  # sealed by harpd (root), for this request

    cases: dict[str, bytes] = {}
    cases["replayed"] = good
    real = good.split(b"\n")[0]
    cases["forged"] = real[:20] + bytes(reversed(real[20:-1])) + b":\n" + body + b"\n"
    cases["tampered"] = sealed.seal_request(munge, body)[0].replace(b"health", b"retrain")
    with foreign_munged(work) as other:
        cases["foreign"] = sealed.seal_request(Munge(other), body)[0]
    expiring = sealed.seal_request(munge, body, ttl=1)[0]
    made = time.monotonic()
    want = {
        "replayed": "credential replayed",
        "forged": "credential refused",
        "tampered": "changed after the credential was made",
        "foreign": "not made with this cluster's MUNGE key",
        "expired": "credential expired",
    }
    for name, data in cases.items():
        lines = _exchange(port, data)
        assert len(lines) == 1 and want[name] in lines[0].decode(), (name, lines)
    while time.monotonic() < made + 2.5:  # munged counts whole seconds: be past the 1 s TTL for sure
        time.sleep(0.1)
    lines = _exchange(port, expiring)
    assert len(lines) == 1 and want["expired"] in lines[0].decode(), lines
    log = h.log.read_text()
    refusals = [ln for ln in log.splitlines() if "refused 127.0.0.1:" in ln]
    assert len(refusals) == 5, refusals
    for needle in want.values():
        assert any(needle in ln for ln in refusals), (needle, refusals)
    assert "Traceback" not in log


# --------------------------------------------------------------- port squatter


def test_a_port_squatters_answer_is_rejected_and_the_job_submitted_unchanged(
    slurm_cluster, work, munge_socket, tokens
) -> None:
    ensure_user(USER)
    port = free_port()
    env = client_env(str(slurm_cluster.conf), "/nonexistent/harpd.sock")
    env.update({"HARP_SERVERS": f"127.0.0.1:{port}", "HARP_MUNGE_SOCKET": munge_socket})
    lie = client.dumps(
        {
            "ok": True,
            "decision": decision(
                change("time", "00:01:00"), partition="short", max_time_s=slurm_cluster.partitions["short"] * 60
            ),
        }
    )
    py, pythonpath = user_python(USER)
    squatter = subprocess.Popen(
        [
            "runuser",
            "-u",
            USER,
            "--",
            "env",
            "-i",
            f"PYTHONPATH={pythonpath}",
            py,
            "-c",
            SQUATTER,
            str(port),
            munge_socket,
            lie,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd="/",
    )
    try:
        assert squatter.stdout is not None and squatter.stdout.readline().strip() == "listening", (
            squatter.stderr.read() if squatter.stderr else ""
        )
        token = f"harp-squat-{uuid.uuid4().hex[:8]}"
        tokens.append(token)
        proc = subprocess.run(
            [sys.executable, "-c", RUN_SUBMIT, "--parsable", "-J", token, f"--comment={token}", "job.sh"],
            capture_output=True,
            text=True,
            env=env,
            cwd=str(work),
            timeout=120,
        )
        assert squatter.wait(60) == 0, squatter.stderr.read() if squatter.stderr else ""
    finally:
        if squatter.poll() is None:
            squatter.kill()
            squatter.wait()
    assert proc.returncode == 0, proc.stderr
    assert "not believed" in proc.stderr and "not by harpd" in proc.stderr, proc.stderr
    assert proc.stderr.endswith("; submitting your job unchanged\n"), proc.stderr
    job_id = proc.stdout.strip().split(";")[0]
    limit = slurm_cluster.scontrol("show", "job", job_id)
    assert "TimeLimit=00:05:00" in limit  # the script's own --time=5, not the squatter's 1 minute


# ------------------------------------------------------------ restart mid-load


def test_harpd_restarted_mid_load_over_tcp_every_submission_lands_once(
    slurm_cluster, work, tcp_harpd, munge_socket, tokens
) -> None:
    h = tcp_harpd
    token = f"harp-tcpload-{uuid.uuid4().hex[:8]}"
    tokens.append(token)
    names = [f"{token}-{i}" for i in range(60)]
    # down: SIGTERM, the TCP port closes with the socket; up: the same port again (SO_REUSEADDR)
    load = submit_through_outage(h.stop, h.start, names, tcp_env(slurm_cluster, h, munge_socket), work, token)
    assert [r for r in load.results if not r.stderr], "harpd answered none over TCP"
    wait_log(h, "predict uid=0 from 127.0.0.1:")


# ------------------------------------------------- without libmunge: the commands


def test_the_munge_commands_do_the_work_where_libmunge_is_missing(tcp_harpd, munge_socket) -> None:
    """HARP_MUNGE_COMMANDS=1 stands for a node without libmunge.so.2: munge/unmunge instead, same answers."""
    port = int((tcp_harpd.listen or "").rsplit(":", 1)[1])
    code = (
        "import sys; from harp_submit import client; from harp_submit.munge import Munge, MungeError\n"
        "m = Munge(sys.argv[1]); assert m.via == 'munge/unmunge commands', m.via\n"
        "print(client.call_tcp(('127.0.0.1', int(sys.argv[2])), {'op': 'health'}, 30, m)['ok'])\n"
        "cred = m.encode(b'payload')\n"
        "print(m.decode(cred)[0].decode())\n"
        "try:\n    m.decode(cred)\nexcept MungeError as exc:\n    print(exc.code, exc.message)\n"
    )
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("HARP_")},
        "HARP_MUNGE_COMMANDS": "1",
        "PYTHONPATH": str(REPO),
    }
    out = subprocess.run(
        [sys.executable, "-c", code, munge_socket, str(port)], capture_output=True, text=True, env=env, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["True", "payload", "17 credential replayed (munge error 17)"], out.stdout


# ------------------------------------------- munged's protocol spoken directly


def test_munged_protocol_and_libmunge_read_each_others_credentials(munge_socket) -> None:
    """harp speaks munged's message format itself (no ctypes on harp-submit's path): libmunge agrees with it."""
    from harp_submit.munge import WIRE, Munge, MungeError

    wire = Munge(munge_socket)
    lib = Munge(munge_socket)
    lib._use_library()
    assert (wire.via, lib.via) == (WIRE, "libmunge")
    for make, read in ((wire, lib), (lib, wire)):
        payload = b"harp1 request \x00\xff" + os.urandom(16)
        cred = make.encode(payload)
        assert read.decode(cred) == (payload, os.getuid(), os.getgid())
        with pytest.raises(MungeError) as replayed:
            read.decode(cred)
        assert replayed.value.code == 17
