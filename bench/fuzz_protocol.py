"""Fuzz harpd's socket protocol, in process and against a live harpd; target: no failure.

Phase 1 (coverage-guided with atheris when installed, else a seeded random
mutator): every input is one request line as a hostile local user could
send it.  ``protocol.parse_request`` must return a model or raise
``ProtocolError`` with a one-line message; every request that validates goes
through ``Handlers.handle`` as a plain user, whose answer must encode to one
JSON line, never say "internal error", and refuse every admin operation.

Phase 2: a real ``harpd`` process (temporary config, socket and store; Slurm
out of reach) gets random and mutated bytes over its socket, in random
chunks.  Each request must get exactly one JSON line with a boolean ``ok``
(an empty one may just be closed, as a probe), harpd must still answer
``health`` at the end, and its log must hold no traceback.

    python bench/fuzz_protocol.py [--runs 1000000] [--live-runs 5000] [--engine auto|atheris|random]
"""

# bench: timeout=900

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import _fuzzing  # noqa: E402

from tests.helpers.harpd_process import stop_harpd, wait_for_health  # noqa: E402

SEEDS = [
    b'{"v": 1, "op": "health"}',
    b'{"v": 1, "op": "status", "job_id": "12_3"}',
    b'{"v": 1, "op": "predict", "job": {"partition": "short", "job_name": "$(touch /tmp/pwned)", '
    b'"request": {"time_s": 600, "mem_mb": 100, "cpus_per_task": 2}, "commands": ["srun ./a.out; touch /tmp/x"], '
    b'"harp_lines": ["#HARP dnn model=llama-7b gpus=2"], "array_size": 4}}',
    b'{"v": 1, "op": "register", "job_id": "123", "job": {"argv": ["-t", "5", "--wrap=id"], '
    b'"sbatch_env": {"SBATCH_TIMELIMIT": "5"}}, "original": {"time_s": 300}, "submitted": {"time_s": 600}, '
    b'"decision": {"changes": [{"option": "time", "value": "00:10:00", "old": "5", "reason": "r"}], '
    b'"limits": {"partition": "short", "max_time_s": 3600}, "model": "m", "explain": {"n": 3}}}',
    b'{"v": 1, "op": "import", "path": "/etc/shadow"}',
    b'{"v": 1, "op": "retrain"}',
    b'{"v": 1, "op": "reload"}',
    b'{"v": 2, "op": "health"}',
    b'{"op": "status", "job_id": "1; touch /tmp/pwned"}',
    b"[" * 64 + b"]" * 64,
]


def load():
    from harpd import protocol as p
    from harpd.daemon.handlers import AdminActions, Handlers, Peer
    from harpd.store import Store

    work = Path(os.environ.get("HARP_FUZZ_WORK") or tempfile.mkdtemp(prefix="harp-fuzz-proto-"))
    store = Store.open(work / "harp.db")
    done: list[str] = []
    handlers = Handlers(
        store,
        actions=AdminActions(
            retrain=lambda: done.append("retrain"),
            reload=lambda: done.append("reload"),
            importer=lambda path, st: done.append(path),
        ),
    )
    user = Peer(pid=1, uid=4242, gid=4242, user="fuzzer", groups=frozenset({4242}))

    def check(data: bytes) -> None:
        try:
            req = p.parse_request(data)
        except p.ProtocolError as exc:
            msg = str(exc)
            assert msg and "\n" not in msg and len(msg) <= 300, repr(msg)
            return
        answer = handlers.handle(user, req)
        line = p.encode(answer)
        assert line.endswith(b"\n") and line.count(b"\n") == 1
        obj = json.loads(line)
        assert isinstance(obj.get("ok"), bool)
        if not obj["ok"]:
            assert obj["error"] and "internal error" not in obj["error"], obj["error"]
        if req.op in p.ADMIN_OPS:
            assert obj["ok"] is False and not done, "a plain user got an admin action done"

    return check


# ------------------------------------------------------------------ live phase


def start_harpd(d: Path) -> tuple[subprocess.Popen[bytes], str, Path]:
    sock = str(d / "harpd.sock")
    cfg = d / "harpd.toml"
    cfg.write_text(
        f'[server]\nsocket = "{sock}"\nrequest_timeout_s = 3\nmax_clients = 64\n'
        f'[store]\npath = "{d}/lib/harp.db"\n[slurm]\nbin_dir = "{d}/no-slurm"\n'
        "[ingest]\npoll_interval_s = 3600\n[recovery]\nenabled = false\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HARP_", "SLURM_"))}
    env["PYTHONPATH"] = str(REPO)
    log = d / "harpd.log"
    fh = log.open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "harpd.daemon.main", "--config", str(cfg), "--log-level", "info"],
        stdout=fh,
        stderr=subprocess.STDOUT,
        env=env,
        cwd=str(d),
    )
    fh.close()
    try:
        wait_for_health(sock, proc, log)
    except AssertionError as exc:
        raise SystemExit(str(exc)) from None
    return proc, sock, log


def exchange(path: str, chunks: list[bytes], timeout: float = 10.0) -> tuple[bytes, float]:
    t = time.perf_counter()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(path)
        try:
            for c in chunks:
                s.sendall(c)
            s.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            pass
        buf = b""
        try:
            while chunk := s.recv(65536):
                buf += chunk
        except ConnectionResetError:
            pass
    return buf, time.perf_counter() - t


def live(args: argparse.Namespace) -> int:
    n = args.live_runs
    if n <= 0:
        return 0
    rng = random.Random(args.seed)
    d = Path(tempfile.mkdtemp(prefix="hfp-", dir="/tmp"))
    proc, sock, log = start_harpd(d)
    failures: list[str] = []
    tried = 0
    slowest = 0.0
    try:
        for i in range(n):
            kind = rng.random()
            if kind < 0.15:
                data = bytes(rng.randrange(256) for _ in range(rng.randint(0, 2000)))
            else:
                data = _fuzzing.mutate(rng, rng.choice(SEEDS), SEEDS, 4096)
            if rng.random() < 0.8:
                data += b"\n"
            cuts = sorted(rng.randint(1, max(1, len(data) - 1)) for _ in range(rng.randint(0, 3)))
            chunks = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)]) if data[a:b]]
            tried += 1
            try:
                answer, secs = exchange(sock, chunks)
            except OSError as exc:
                failures.append(f"input {i}: {exc}")
                continue
            slowest = max(slowest, secs)
            request = data.split(b"\n", 1)[0]
            if not request and not answer:
                continue  # an empty request is taken as a probe: closing is fine
            try:
                obj = json.loads(answer)
                assert answer.endswith(b"\n") and answer.count(b"\n") == 1
                assert isinstance(obj.get("ok"), bool)
                assert obj["ok"] or (obj.get("error") and "internal error" not in obj["error"])
            except (ValueError, AssertionError):
                failures.append(f"input {i} {data[:80]!r}: answer {answer[:120]!r}")
            if len(failures) >= 10:
                break
        health, _ = exchange(sock, [b'{"v":1,"op":"health"}\n'])
        if proc.poll() is not None:
            failures.append(f"harpd died (exit {proc.returncode})")
        elif not health.startswith(b'{"ok":true'):
            failures.append(f"health after fuzzing: {health[:200]!r}")
    finally:
        stop_harpd(proc)
        text = log.read_text(errors="replace")
        shutil.rmtree(d, ignore_errors=True)
    tracebacks = text.count("Traceback (most recent call last)")
    if tracebacks:
        failures.append(f"{tracebacks} traceback(s) in harpd's log, first:\n" + text[text.index("Traceback") :][:1500])
    for f in failures:
        print(f"fuzz_protocol_live: FAILURE {f}")
    print(f"fuzz_protocol_live: {tried:,} inputs to a live harpd, slowest answer {slowest * 1000:.0f} ms")
    print(f"FIGURE fuzz_protocol_live_inputs: {tried} inputs (target >= {n}) {'PASS' if tried >= n else 'FAIL'}")
    print(
        f"FIGURE fuzz_protocol_live_failures: {len(failures)} failures (target == 0) "
        f"{'PASS' if not failures else 'FAIL'}"
    )
    return 0 if (not failures and tried >= n) else 1


def _add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--live-runs", type=int, default=5000, help="inputs sent to a live harpd (default 5000; 0: skip)")


if __name__ == "__main__":
    sys.exit(
        _fuzzing.main(
            "fuzz_protocol",
            load,
            SEEDS,
            default_runs=1_000_000,
            instrument=["harpd"],
            max_len=8192,
            add_arguments=_add_arguments,
            after=live,
        )
    )
