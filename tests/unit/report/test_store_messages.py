"""`harp status` and `harp report` say the same words for the same unreadable store, and read -S -5d."""

from __future__ import annotations

import contextlib
import io
import os
import time

import pytest

from harpd.cli.main import attach_dash_values
from harpd.cli.main import main as harp
from harpd.report.window import parse_when
from harpd.store import Store


@pytest.fixture(autouse=True)
def clean_env(monkeypatch, tmp_path):
    for name in list(os.environ):
        if name.upper().startswith("HARP_"):
            monkeypatch.delenv(name)
    cfg = tmp_path / "harpd.toml"
    cfg.write_text(f'[server]\nsocket = "{tmp_path}/no-harpd.sock"\n')
    monkeypatch.setenv("HARP_CONFIG", str(cfg))


def _err(*argv: str) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        rc = harp(list(argv))
    return rc, err.getvalue().strip()


def _both(db) -> tuple[str, str]:
    rc1, status = _err("status", "5", "--direct", "--db", str(db))
    rc2, report = _err("report", "--db", str(db), "-S", "all")
    assert rc1 == rc2 == 2, (status, report)
    return status, report


def test_a_missing_store(tmp_path):
    status, report = _both(tmp_path / "none.db")
    assert (
        status
        == report
        == (
            f"harp: cannot open the store {tmp_path / 'none.db'} (no such file); "
            "run `harp import` or start harpd first, or pass --db PATH"
        )
    )


def test_a_directory(tmp_path):
    status, report = _both(tmp_path)
    assert status == report == f"harp: {tmp_path} is a directory; pass the store file to --db"


def test_a_file_that_is_not_a_store(tmp_path):
    bad = tmp_path / "junk.db"
    bad.write_bytes(b"this is not sqlite" * 100)
    status, report = _both(bad)
    assert status == report and "Traceback" not in status and str(bad) in status


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to drop the permission check's override")
def test_a_store_this_user_cannot_open_without_harpd(tmp_path):
    """Without --db: the daemon is down and the store is root's: one line, the same from both."""
    import shutil
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    here = Path(tempfile.mkdtemp(prefix="harp-store-msg-", dir="/tmp"))  # searchable by everyone, unlike tmp_path
    os.chmod(here, 0o755)
    db = here / "harp.db"
    Store.open(db).close()
    os.chmod(db, 0o600)
    cfg = here / "harpd.toml"
    cfg.write_text(f'[server]\nsocket = "{tmp_path}/no-harpd.sock"\n[store]\npath = "{db}"\n')
    cfg.chmod(0o644)
    code = "import sys; from harpd.cli.main import main; sys.exit(main(sys.argv[1:]))"
    env = {**os.environ, "HARP_CONFIG": str(cfg), "PYTHONPATH": os.pathsep.join(sys.path)}
    out = {}
    for cmd in (["status", "5"], ["report"]):
        proc = subprocess.run(
            [
                "setpriv",
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                sys.executable,
                "-c",
                code,
                *cmd,
                "--timeout",
                "2",
            ],
            capture_output=True,
            text=True,
            env=env,
            cwd="/",
        )
        out[cmd[0]] = (proc.returncode, proc.stderr.strip())
    shutil.rmtree(here, ignore_errors=True)
    assert out["status"][0] == out["report"][0] == 2, out
    assert out["status"][1] == out["report"][1], out
    assert out["status"][1].startswith(f"harp: cannot open the store {db} (permission denied), and ")


def test_dash_values_reach_their_option_as_getopt_reads_them():
    assert attach_dash_values(["report", "-S", "-5d", "-E", "-1h"], ("-S", "-E")) == ["report", "-S-5d", "-E-1h"]
    assert attach_dash_values(["report", "--since", "-5d"], ("--since",)) == ["report", "--since=-5d"]
    assert attach_dash_values(["report", "-S", "--", "-x"], ("-S",)) == ["report", "-S", "--", "-x"]
    assert attach_dash_values(["report", "-S"], ("-S",)) == ["report", "-S"]


@pytest.mark.parametrize(
    "text, back_s",
    [
        ("-5d", 5 * 86400),
        ("5d", 5 * 86400),
        ("-12h", 12 * 3600),
        ("-5days", 5 * 86400),
        ("2weeks", 14 * 86400),
        ("-30m", 1800),
        ("now-5days", 5 * 86400),
    ],
)
def test_spans_back_with_or_without_a_minus(text, back_s):
    now = 1.8e9
    assert parse_when(text, now) == pytest.approx(now - back_s)


@pytest.mark.parametrize("text", ["--5d", "-5x", "-", "-d", "5d-"])
def test_bad_spans_are_refused(text):
    with pytest.raises(ValueError):
        parse_when(text, time.time())


def test_report_takes_minus_five_days(tmp_path):
    db = tmp_path / "harp.db"
    Store.open(db).close()
    rc, err = _err("report", "--db", str(db), "-S", "-5d")
    assert rc == 0, err
    rc, err = _err("report", "--db", str(db), "--since", "-5x")
    assert rc == 2 and "cannot read '-5x'" in err
