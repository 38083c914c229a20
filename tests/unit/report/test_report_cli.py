"""`harp report` end to end: identity scoping, options, outputs, bad input."""

import csv
import io
import json
import types

import pytest
from report_helpers import job

from harpd import access
from harpd.cli import report_cmd
from harpd.cli.main import main
from harpd.records import Outcome
from harpd.store import Store


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A config naming the store and an admin group; a store with two users."""
    db = tmp_path / "harp.db"
    with Store.open(db) as s:
        s.insert_jobs(
            [
                job("1", user="alice"),
                job("2", user="bob", outcome=Outcome.OOM),
                job("3", user="bob", end_time=1_000_000_000.0),
            ]
        )  # 2001: outside the default window
    conf = tmp_path / "harpd.toml"
    conf.write_text(
        f'[server]\nadmin_group = "hpcadm"\n[store]\npath = "{db}"\n[report]\ndefault_window_days = 36500\n'
    )
    monkeypatch.delenv("HARP_CONFIG", raising=False)
    users = {0: "root", 1001: "alice", 1002: "bob", 1003: "carol"}
    monkeypatch.setattr(
        access.pwd,
        "getpwuid",
        lambda uid: types.SimpleNamespace(pw_name=users[uid]) if uid in users else (_ for _ in ()).throw(KeyError(uid)),
    )
    monkeypatch.setattr(
        access.grp,
        "getgrnam",
        lambda name: (
            types.SimpleNamespace(gr_gid=4000, gr_mem=["carol"])
            if name == "hpcadm"
            else (_ for _ in ()).throw(KeyError(name))
        ),
    )
    monkeypatch.setattr(access.os, "getgrouplist", lambda name, gid: [gid, 4000] if name == "carol" else [gid])
    monkeypatch.setattr(report_cmd.os, "getgroups", lambda: [])
    monkeypatch.setattr(report_cmd.os, "getgid", lambda: 100)
    return types.SimpleNamespace(db=db, conf=conf, tmp=tmp_path)


def as_uid(monkeypatch, uid):
    monkeypatch.setattr(report_cmd.os, "getuid", lambda: uid)


def run(site, *args):
    return main(["--config", str(site.conf), "report", *args])


def json_report(site, capsys, *args):
    assert run(site, "--format", "json", *args) == 0
    return json.loads(capsys.readouterr().out)


def test_root_sees_everyone(site, monkeypatch, capsys):
    as_uid(monkeypatch, 0)
    d = json_report(site, capsys, "--since", "all")
    assert d["scope"] == "all users" and {g["key"] for g in d["groups"]} == {"alice", "bob"}
    assert d["total"]["jobs"] == 3 and d["total"]["oom"] == 1


def test_a_user_sees_only_their_own_jobs(site, monkeypatch, capsys):
    as_uid(monkeypatch, 1002)
    d = json_report(site, capsys, "--since", "all", "--by", "partition")
    assert d["scope"] == "user bob" and d["total"]["jobs"] == 2


def test_a_user_cannot_ask_for_someone_else(site, monkeypatch, capsys):
    as_uid(monkeypatch, 1001)
    assert run(site, "--user", "bob") == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("harp: only admins") and "hpcadm" in err and "\n" not in err
    assert run(site, "--user", "alice", "--format", "csv") == 0  # naming yourself is fine


def test_admin_group_members_see_everyone_and_may_pick_a_user(site, monkeypatch, capsys):
    as_uid(monkeypatch, 1003)
    assert json_report(site, capsys, "--since", "all")["scope"] == "all users"
    d = json_report(site, capsys, "--since", "all", "--user", "bob")
    assert d["scope"] == "user bob" and d["total"]["jobs"] == 2


def test_unknown_uid_is_a_clear_error(site, monkeypatch, capsys):
    as_uid(monkeypatch, 777)
    assert run(site) == 2
    assert "uid 777 has no user name" in capsys.readouterr().err


@pytest.mark.parametrize(
    "args, message",
    [
        (["--since", "last tuesday"], "--since: cannot read"),
        (["--since", "1d", "--until", "2d"], "not before --until"),
        (["--top", "-1"], "--top -1"),
        (["--db", "/nonexistent/harp.db"], "cannot open the store /nonexistent/harp.db (no such file)"),
    ],
)
def test_bad_input_is_one_line(site, monkeypatch, capsys, args, message):
    as_uid(monkeypatch, 0)
    assert run(site, *args) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_a_file_that_is_not_a_store(site, monkeypatch, capsys):
    as_uid(monkeypatch, 0)
    bad = site.tmp / "notes.db"
    bad.write_text("hello, this is not sqlite" * 100)
    before = bad.read_bytes()
    assert run(site, "--db", str(bad)) == 2
    err = capsys.readouterr().err
    assert err.startswith("harp: ") and "not a harp database" in err and err.count("\n") == 1
    assert bad.read_bytes() == before  # untouched


def test_outputs_to_files(site, monkeypatch, capsys):
    as_uid(monkeypatch, 0)
    out = site.tmp / "r.csv"
    assert run(site, "--since", "all", "--format", "csv", "-o", str(out)) == 0
    rows = list(csv.reader(io.StringIO(out.read_text())))
    assert rows[0][:3] == ["User", "source", "jobs"] and sorted(r[0] for r in rows[1:]) == ["alice", "bob"]
    html = site.tmp / "r.html"
    assert run(site, "--since", "all", "--format", "html", "-o", str(html)) == 0
    assert html.read_text().startswith("<!DOCTYPE html>")
    assert not [p for p in site.tmp.iterdir() if p.name.startswith(".r.")]  # no temp files left
    assert run(site, "--format", "csv", "-o", str(site.tmp / "missing-dir" / "r.csv")) == 2
    assert "cannot write" in capsys.readouterr().err


def test_html_to_a_terminal_asks_for_a_file(site, monkeypatch, capsys):
    as_uid(monkeypatch, 0)
    monkeypatch.setattr(report_cmd.sys.stdout, "isatty", lambda: True)
    assert run(site, "--format", "html") == 2
    assert "-o report.html" in capsys.readouterr().err


def test_empty_window_says_where_the_jobs_are(site, monkeypatch, capsys):
    as_uid(monkeypatch, 0)
    assert run(site, "--since", "2001-09-10", "--until", "2001-09-11") == 0
    out = capsys.readouterr().out
    assert "0 jobs" in out and "--since all" in out and "holds 3 finished job(s)" in out


def test_default_table_run(site, monkeypatch, capsys):
    as_uid(monkeypatch, 0)
    assert run(site) == 0
    out = capsys.readouterr().out
    assert out.startswith("harp report: jobs that ended since ") and "TOTAL" in out
    assert max(len(x) for x in out.splitlines()) <= 100


# ----------------------------------------------------- through harpd
# A user who cannot open the store (root's, as harpd leaves it) gets the
# report from harpd; the real two-user test is tests/unit/hostile/test_two_users.py.


@pytest.fixture
def daemon(site):
    """An in-process harpd serving the site's store, and a config whose store this user cannot open."""
    import shutil
    import tempfile
    import threading
    from pathlib import Path

    from harpd.config import HarpSettings
    from harpd.daemon.handlers import Handlers
    from harpd.daemon.server import Server

    d = Path(tempfile.mkdtemp(prefix="hr-", dir="/tmp"))  # socket paths must stay short
    store = Store.open(site.db)
    srv = Server(
        d / "harpd.sock",
        Handlers(store, HarpSettings.model_validate({"report": {"default_window_days": 36500, "max_concurrent": 1}})),
    )
    srv.bind()
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    conf = site.tmp / "user.toml"
    conf.write_text(f'[server]\nsocket = "{d}/harpd.sock"\n[store]\npath = "{site.tmp}/root-only/harp.db"\n')
    yield types.SimpleNamespace(conf=conf, sock=d / "harpd.sock", server=srv)
    srv.shutdown()
    t.join(5)
    srv.close()
    store.close()
    shutil.rmtree(d, ignore_errors=True)


def test_a_store_out_of_reach_is_read_through_harpd(site, daemon, monkeypatch, capsys):
    as_uid(monkeypatch, 1001)
    assert main(["--config", str(daemon.conf), "report", "--format", "json", "--since", "all"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["source"].startswith("harpd (") and d["total"]["jobs"] == 3  # harpd saw root: this process
    out = site.tmp / "via-harpd.html"
    assert main(["--config", str(daemon.conf), "report", "--format", "html", "-o", str(out)]) == 0
    assert out.read_text().startswith("<!DOCTYPE html>")


def test_daemon_flag_asks_harpd_even_when_the_store_opens(site, daemon, monkeypatch, capsys):
    as_uid(monkeypatch, 0)
    conf = site.tmp / "both.toml"
    conf.write_text(f'[server]\nsocket = "{daemon.sock}"\n[store]\npath = "{site.db}"\n')
    assert main(["--config", str(conf), "report", "--format", "json", "--since", "all", "--daemon"]) == 0
    assert json.loads(capsys.readouterr().out)["source"].startswith("harpd (")
    assert main(["--config", str(conf), "report", "--format", "json", "--since", "all"]) == 0
    assert json.loads(capsys.readouterr().out)["source"] == str(site.db)


def test_harpds_refusal_is_the_error_line(site, daemon, monkeypatch, capsys):
    as_uid(monkeypatch, 1001)
    assert main(["--config", str(daemon.conf), "report", "--since", "yesterday-ish"]) == 2  # caught locally
    assert "--since: cannot read" in capsys.readouterr().err
    daemon.server.handlers._reports.acquire()  # its one report slot taken: harpd's own words reach the user
    assert main(["--config", str(daemon.conf), "report"]) == 2
    err = capsys.readouterr().err
    assert err == "harp: harpd is already building 1 report(s); retry in a minute\n"


def test_daemon_flag_without_harpd_is_one_line(site, monkeypatch, capsys):
    as_uid(monkeypatch, 0)
    conf = site.tmp / "down.toml"
    conf.write_text(f'[server]\nsocket = "{site.tmp}/none.sock"\n[store]\npath = "{site.db}"\n')
    assert main(["--config", str(conf), "report", "--daemon"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("harp: harpd is not running") and f"drop --daemon to read the store {site.db}" in err
    assert err.count("\n") == 1


def test_no_store_and_no_harpd_is_one_line(site, monkeypatch, capsys):
    as_uid(monkeypatch, 1001)
    conf = site.tmp / "nothing.toml"
    conf.write_text(f'[server]\nsocket = "{site.tmp}/none.sock"\n[store]\npath = "{site.tmp}/none.db"\n')
    assert main(["--config", str(conf), "report"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"cannot open the store {site.tmp}/none.db (no such file)" in err and "harpd is not running" in err


@pytest.mark.parametrize(
    "args, message",
    [
        (["--daemon", "--db", "/tmp/x.db"], "drop --db or --daemon"),
        (["--timeout", "0"], "--timeout 0: must be a positive"),
    ],
)
def test_bad_daemon_options(site, monkeypatch, capsys, args, message):
    as_uid(monkeypatch, 0)
    assert run(site, *args) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
